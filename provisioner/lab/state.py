"""Per-node simulated hardware state: the one file the lab's stand-in vendor tools read.

Tests change a node's hardware (driver version, ECC counters, a GPU that vanished) only
through this file. The stand-ins read it on every call, so a change shows at once.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

STATE_FILE_NAME = "state.json"
NODE_STATE_MOUNT = "/var/lib/lab-hw"
# The HCAs' sysfs view, rendered beside the state (node_exporter's --path.sysfs in the lab).
SYSFS_DIR_NAME = "sys"
HW_TOOL = Path(__file__).resolve().parent / "standins" / "lab-hw-tool"

DEFAULT_DRIVER_VERSION = "535.161.08"
DEFAULT_GPU_NAME = "NVIDIA H100 80GB HBM3"
DEFAULT_VBIOS = "96.00.74.00.0D"
_BUS_NUMBERS = ("19", "3B", "4C", "5D", "9B", "BB", "CB", "DB")


def _zero_ecc() -> dict[str, int]:
    return {
        "sram_correctable": 0,
        "sram_uncorrectable_parity": 0,
        "sram_uncorrectable_secded": 0,
        "dram_correctable": 0,
        "dram_uncorrectable": 0,
    }


def default_gpu(index: int, node_number: int) -> dict[str, Any]:
    """A healthy simulated H100 SXM5 at `index` on lab node number `node_number`."""
    bus = _BUS_NUMBERS[index % len(_BUS_NUMBERS)]
    return {
        "index": index,
        "name": DEFAULT_GPU_NAME,
        "uuid": f"GPU-1ab{node_number:05x}-{index:04x}-4c0d-9e5f-00000000{index:04x}",
        "serial": f"16501240{node_number:03d}{index:02d}",
        "bus_id": f"00000000:{bus}:00.0",
        "vbios_version": DEFAULT_VBIOS,
        "memory_total_mib": 81559,
        "memory_used_mib": 0,
        "temperature_c": 30 + index,
        "power_draw_w": 68.5,
        "utilization_gpu": 0,
        "ecc_errors": {"volatile": _zero_ecc(), "aggregate": _zero_ecc()},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
    }


DEFAULT_HCA_FIRMWARE = "28.39.1002"
CONNECTX7_PSID = "MT_0000000838"


def default_hca(index: int, node_number: int) -> dict[str, Any]:
    """A healthy simulated ConnectX-7 NDR (400 Gb/s) HCA with one InfiniBand port."""
    guid = f"0x946dae0300{node_number:02x}{index:04x}"
    return {
        "name": f"mlx5_{index}",
        "ca_type": "MT4129",
        "device_type": "ConnectX7",
        "part_number": "MCX75310AAS-NEA_Ax",
        "description": "NVIDIA ConnectX-7 HHHL Adapter card; 400GbE / NDR IB (default mode); Single-port OSFP",
        "psid": CONNECTX7_PSID,
        "pci": f"{0x1a + 0x10 * index:02x}:00.0",
        "firmware_version": DEFAULT_HCA_FIRMWARE,
        "image_version": DEFAULT_HCA_FIRMWARE,
        "node_guid": guid,
        "ports": [{"port": 1, "state": "Active", "physical_state": "LinkUp", "rate": 400,
                   "link_layer": "InfiniBand", "base_lid": 10 * node_number + index, "sm_lid": 1}],
    }


def default_node_state(node_number: int, gpu_count: int, hca_count: int = 0) -> dict[str, Any]:
    return {
        "gpus": [default_gpu(index, node_number) for index in range(gpu_count)],
        "hcas": [default_hca(index, node_number) for index in range(hca_count)],
    }


def read_state(directory: Path) -> dict[str, Any]:
    return json.loads((directory / STATE_FILE_NAME).read_text(encoding="utf-8"))


@cache
def _hw_tool() -> ModuleType:
    """The stand-in HCA tool as a module: its sysfs renderer is the one the nodes use."""
    loader = importlib.machinery.SourceFileLoader("lab_hw_tool", str(HW_TOOL))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def write_state(directory: Path, state: dict[str, Any]) -> None:
    """Write atomically (the stand-ins may read at any moment), then render the sysfs view."""
    directory.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".state-")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        json.dump(state, stream, indent=2)
    os.chmod(temporary, 0o644)
    os.replace(temporary, directory / STATE_FILE_NAME)
    _hw_tool().render_sysfs(state, str(directory / SYSFS_DIR_NAME))


def update_state(directory: Path, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    state = read_state(directory)
    change(state)
    write_state(directory, state)
    return state


def main() -> None:
    """`python -m provisioner.lab.state --gpus N [--node K]`: print a healthy node's state as JSON."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hcas", type=int, default=0)
    parser.add_argument("--node", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(default_node_state(args.node, args.gpus, args.hcas), indent=2))


if __name__ == "__main__":
    main()
