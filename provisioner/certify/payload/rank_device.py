"""The device of a torchrun rank, shared by the sweep and the smoke trainer (installed beside them)."""
from __future__ import annotations

import os

import torch


def device_for_rank() -> torch.device:
    """This rank's GPU (LOCAL_RANK), or the CPU when the node has none."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so timings cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
