"""The device of a torchrun rank, shared by the sweep and the smoke trainer (installed beside them)."""
from __future__ import annotations

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

REFUSED_MARK = "PROVISION-REFUSED "
# Exit status of a rank that refuses to run (no GPU for it where the node has GPUs).
EXIT_REFUSED = 3


def cuda_shortfall(visible: int, local_world: int) -> str | None:
    """Why this rank cannot have a GPU of its own, or None when every local rank has one."""
    if visible == 0:
        visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        return (f"CUDA required but torch sees no GPU (torch {torch.__version__}, built for CUDA "
                f"{torch.version.cuda or 'none'}; CUDA_VISIBLE_DEVICES={visible_devices})")
    if visible < local_world:
        return f"CUDA required: torch sees {visible} GPU(s) for {local_world} ranks on this node"
    return None


def print_marked(mark: str, value: object) -> None:
    """One line, mark then value as JSON, written with one write call.

    The ranks of a node share the step's stdout; print() may hand the text and its newline to
    the pipe separately, and another rank's line can land between them. A single write of a
    line under PIPE_BUF bytes (4 KiB) is never cut into."""
    sys.stdout.flush()
    data = (mark + json.dumps(value) + "\n").encode()
    while data:
        data = data[os.write(sys.stdout.fileno(), data):]


def refuse(reason: str) -> None:
    """Say on stdout which host and rank refuse and why (the certification reads it), then exit."""
    print_marked(REFUSED_MARK, {"host": socket.gethostname(), "rank": int(os.environ.get("RANK", "0")),
                                "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "reason": reason})
    print(f"{socket.gethostname()} rank {os.environ.get('RANK', '0')}: {reason}", file=sys.stderr, flush=True)
    os._exit(EXIT_REFUSED)


def device_for_rank(require_cuda: bool = False) -> torch.device:
    """This rank's GPU (LOCAL_RANK), or the CPU when the node has none.

    With require_cuda (the node has GPUs) a rank without a GPU of its own refuses to run
    rather than fall back to gloo on the CPU, whose figures would certify nothing."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if require_cuda and (reason := cuda_shortfall(visible, local_world)):
        refuse(reason)
    if visible:
        # Without require_cuda, ranks beyond the GPUs share them round-robin (tests of the
        # checks on fewer GPUs than ranks, over gloo: NCCL refuses two ranks on one GPU).
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % visible)
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def init_group(device: torch.device, backend: str = "auto") -> str:
    """Join the job's process group: NCCL bound to this rank's GPU (device_id: NCCL connects
    eagerly, on the right GPU), gloo on the CPU or when asked for. Returns the backend."""
    if device.type == "cuda" and backend in ("auto", "nccl"):
        dist.init_process_group("nccl", device_id=device)
        return "nccl"
    dist.init_process_group("gloo")
    return "gloo"


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
