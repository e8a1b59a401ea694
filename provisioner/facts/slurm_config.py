"""slurm.conf node and partition lines, rendered from the whole inventory.

Every node appears in slurm.conf whether or not it is in the current play (`--limit`):
a node missing from the controller's slurm.conf is a node Slurm no longer schedules on.
The hardware comes from each node's facts; the GPUs from the inventory, which preflight has
checked against what nvidia-smi lists.
"""

from __future__ import annotations

import re
from typing import Any


class SlurmConfigError(ValueError):
    """The inventory or the facts do not describe a node or partition Slurm can accept."""


def gres_type(gpu_model: str) -> str:
    """The GRES type of a GPU model: `H100-SXM5-80GB` -> `h100_sxm5_80gb`."""
    return re.sub(r"[^a-z0-9_]+", "_", gpu_model.lower()).strip("_") or "gpu"


def node_hardware(name: str, facts: dict[str, Any], reserve_percent: float) -> dict[str, int]:
    """CPUs, sockets, cores, threads and RealMemory (MiB, less the reserve) from Ansible facts."""
    wanted = ("processor_vcpus", "processor_count", "processor_cores", "processor_threads_per_core", "memtotal_mb")
    missing = [key for key in wanted if not isinstance(facts.get(key), int) or facts[key] <= 0]
    if missing:
        raise SlurmConfigError(f"{name}: no hardware facts ({', '.join(missing)}); slurm.conf needs every node's "
                               "CPUs and memory: is the node reachable?")
    if not 0 <= reserve_percent < 100:
        raise SlurmConfigError(f"slurm_realmemory_reserve_percent must be in 0..99 (got {reserve_percent})")
    return {
        "CPUs": facts["processor_vcpus"],
        "Sockets": facts["processor_count"],
        "CoresPerSocket": facts["processor_cores"],
        "ThreadsPerCore": facts["processor_threads_per_core"],
        "RealMemory": int(facts["memtotal_mb"] * (100 - reserve_percent) / 100),
    }


def node_line(name: str, address: str, facts: dict[str, Any], reserve_percent: float, gpu_type: str,
              gpu_count: int) -> str:
    """`NodeName=...` for slurm.conf. NodeHostname is the node's own short hostname, by which
    slurmd finds its line, when it differs from the inventory name."""
    hardware = node_hardware(name, facts, reserve_percent)
    fields = [f"NodeName={name}"]
    if facts.get("hostname") and facts["hostname"] != name:
        fields.append(f"NodeHostname={facts['hostname']}")
    fields += [f"NodeAddr={address}"] + [f"{key}={value}" for key, value in hardware.items()]
    if gpu_count > 0:
        fields.append(f"Gres=gpu:{gpu_type}:{gpu_count}")
    return " ".join([*fields, "State=UNKNOWN"])


def partition_nodes(nodes: Any, gpu_nodes: list[str], groups: dict[str, list[str]]) -> list[str]:
    """A partition's `nodes` (ALL, or GPU node names and gpu_nodes sub-groups) as node names."""
    if nodes in ("ALL", None):
        return sorted(gpu_nodes)
    names: list[str] = []
    for entry in [nodes] if isinstance(nodes, str) else nodes:
        members = groups.get(entry) if entry in groups and entry not in gpu_nodes else [entry]
        for member in members or []:
            if member not in gpu_nodes:
                raise SlurmConfigError(f"partition node {member!r} is not a GPU node")
            if member not in names:
                names.append(member)
    return sorted(names)


def partition_lines(partitions: list[dict[str, Any]], gpu_nodes: list[str],
                    groups: dict[str, list[str]]) -> list[str]:
    lines = []
    for partition in partitions:
        members = partition_nodes(partition.get("nodes", "ALL"), gpu_nodes, groups)
        if not members:
            raise SlurmConfigError(f"partition {partition['name']!r} has no nodes")
        fields = [f"PartitionName={partition['name']}", f"Nodes={','.join(members)}",
                  f"Default={'YES' if partition.get('default') else 'NO'}",
                  f"MaxTime={partition.get('max_time') or 'INFINITE'}", "State=UP"]
        lines.append(" ".join(fields))
    return lines


def node_line_from_hostvars(name: str, hostvars: Any, reserve_percent: float, current_nodes_conf: str = "") -> str:
    """The node line of `name` from its inventory variables and facts (any host's view).

    A node that did not answer in this run (no facts) keeps the line the controller has for
    it now: an unreachable node must neither vanish from slurm.conf nor stop the others."""
    host = hostvars[name]
    facts = host.get("ansible_facts") or {}
    if not facts.get("memtotal_mb"):
        for line in current_nodes_conf.splitlines():
            if line.split(" ", 1)[0] == f"NodeName={name}":
                return line
    return node_line(name, str(host.get("ansible_host") or name), facts, reserve_percent,
                     gres_type(str(host.get("gpu_model") or "gpu")), int(host.get("gpu_count") or 0))


