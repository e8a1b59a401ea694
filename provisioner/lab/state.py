"""Per-node simulated hardware state: the one file the lab's stand-in vendor tools read.

Tests change a node's hardware (driver version, ECC counters, a GPU that vanished) only
through this file. The stand-ins read it on every call, so a change shows at once.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE_FILE_NAME = "state.json"
NODE_STATE_MOUNT = "/var/lib/lab-hw"

DEFAULT_DRIVER_VERSION = "535.161.08"
DEFAULT_CUDA_VERSION = "12.2"
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


def default_node_state(node_number: int, gpu_count: int) -> dict[str, Any]:
    return {
        "driver_version": DEFAULT_DRIVER_VERSION,
        "cuda_version": DEFAULT_CUDA_VERSION,
        "gpus": [default_gpu(index, node_number) for index in range(gpu_count)],
    }


def read_state(directory: Path) -> dict[str, Any]:
    return json.loads((directory / STATE_FILE_NAME).read_text(encoding="utf-8"))


def write_state(directory: Path, state: dict[str, Any]) -> None:
    """Write atomically (the stand-ins may read at any moment)."""
    directory.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".state-")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        json.dump(state, stream, indent=2)
    os.chmod(temporary, 0o644)
    os.replace(temporary, directory / STATE_FILE_NAME)


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
    parser.add_argument("--node", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(default_node_state(args.node, args.gpus), indent=2))


if __name__ == "__main__":
    main()
