"""The device of a torchrun rank, shared by the sweep and the smoke trainer (installed beside them)."""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


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


def finish() -> None:
    """Leave the job cleanly, on every rank, once the results are printed.

    The ranks meet once more, tear the process group down together, then leave without the
    interpreter's finalisation: there, gloo's threads can outlive their process group and abort
    the process ("terminate called without an active exception") after a successful run, which
    Slurm would report as a failed step. Callers drop their DistributedDataParallel wrapper first,
    so the group's last reference goes with destroy_process_group.
    """
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
