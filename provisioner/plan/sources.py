"""Where the hardware comes from besides the command line: an inventory, a certification report."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import InputError, InputProblem
from provisioner.inventory.model import Inventory


@dataclass(frozen=True)
class InventoryHardware:
    gpu_model: str
    gpus_per_node: int
    nodes: int
    fabric: str
    port_rate_gbit: int
    hcas_per_node: int


def from_inventory(inventory: Inventory) -> InventoryHardware:
    """The GPU nodes' model, count and fabric; a mixed fleet is refused (plan one kind at a time)."""
    nodes = inventory.gpu_nodes
    kinds = inventory.node_kinds(list(nodes))
    models, counts, hcas, rates = kinds["gpu_model"], kinds["gpu_count"], kinds["ib_hca_count"], kinds["port_rate"]
    where = str(inventory.hosts_file)
    if not nodes:
        raise InputError([InputProblem(where, "gpu_nodes", "no GPU nodes to plan with")])
    if len(models) > 1 or len(counts) > 1 or len(hcas) > 1 or len(rates) > 1:
        raise InputError([InputProblem(where, "gpu_nodes", f"mixed fleet (gpu_model {sorted(models)}, gpu_count "
                                       f"{sorted(counts)}, ib_hca_count {sorted(hcas)}, port rates {sorted(rates)}); "
                                       "plan each kind with explicit --gpu/--nodes")])
    return InventoryHardware(models.pop(), counts.pop(), len(nodes), inventory.cluster.fabric, rates.pop(),
                             hcas.pop())


@dataclass(frozen=True)
class MeasuredBandwidth:
    intra_node_gbps: float | None
    all_nodes_gbps: float | None
    nodes: int
    source: str


def from_certification(path: Path) -> MeasuredBandwidth:
    """busbw at the gradient size from a certification.json: the slowest node inside, the all-nodes run across."""
    try:
        document = json.loads(path.read_text())
        medians = document["medians_gbps"]
        nodes = list(document["nodes"])
    except OSError as error:
        raise InputError([InputProblem(str(path), "", f"cannot read: {error.strerror}")]) from error
    except (ValueError, KeyError, TypeError) as error:
        raise InputError([InputProblem(str(path), "medians_gbps", "not a certification.json of provision "
                                       f"certify ({error.__class__.__name__}: {error})")]) from error
    instrument = "nccl-tests" if any(k.startswith("nccl-tests.") for k in medians) else "sweep"
    per_node = list((medians.get(f"{instrument}.node") or {}).values())
    all_nodes = list((medians.get(f"{instrument}.all") or {}).values())
    if not per_node and not all_nodes:
        raise InputError([InputProblem(str(path), "medians_gbps", "holds no busbw measurement "
                                       "(was the communication part run?)")])
    return MeasuredBandwidth(min(per_node) if per_node else None,
                             statistics.median(all_nodes) if all_nodes and len(nodes) > 1 else None, len(nodes),
                             f"measured by provision certify ({instrument}, {path.name}, {len(nodes)} nodes)")


@dataclass(frozen=True)
class MeasuredStorage:
    """The slowest node's checkpoint write and read bandwidth (GB/s), every node at once."""

    write_gbps: float
    read_gbps: float
    nodes: int
    source: str


def storage_from_certification(path: Path) -> MeasuredStorage | None:
    """The storage part's per-node figures from a certification.json (its slowest node: all nodes
    write their part of a checkpoint at once, so the slowest one ends the save); None where the
    storage part did not run."""
    try:
        storage = json.loads(path.read_text()).get("storage")
        if storage is None:
            return None
        nodes = storage["nodes"]
        write = [float(figures["write_gbps"]) for figures in nodes.values()]
        read = [float(figures["read_gbps"]) for figures in nodes.values()]
    except OSError as error:
        raise InputError([InputProblem(str(path), "", f"cannot read: {error.strerror}")]) from error
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputError([InputProblem(str(path), "storage", f"not a storage measurement of provision certify "
                                       f"({error.__class__.__name__}: {error})")]) from error
    if not write or not read:
        raise InputError([InputProblem(str(path), "storage.nodes", "no node's write and read bandwidth")])
    return MeasuredStorage(min(write), min(read), len(nodes),
                           f"measured by provision certify (storage, {path.name}, {len(nodes)} nodes at once)")
