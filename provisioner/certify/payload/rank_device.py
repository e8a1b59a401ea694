"""The device of a torchrun rank, shared by the sweep and the smoke trainer (installed beside them)."""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import threading

import torch
import torch.distributed as dist

REFUSED_MARK = "PROVISION-REFUSED "
HEARTBEAT_MARK = "PROVISION-HEARTBEAT "
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


def hang_timeout() -> datetime.timedelta | None:
    """The certification's hang timeout (CERTIFY_HANG_TIMEOUT_S), None for torch's default."""
    seconds = float(os.environ.get("CERTIFY_HANG_TIMEOUT_S") or 0)
    return datetime.timedelta(seconds=seconds) if seconds > 0 else None


def init_group(device: torch.device, backend: str = "auto") -> str:
    """Join the job's process group: NCCL bound to this rank's GPU (device_id: NCCL connects
    eagerly, on the right GPU), gloo on the CPU or when asked for. Returns the backend.

    Its timeout is the certification's hang timeout: a collective that waits longer for a rank
    ends with an error (NCCL's watchdog, with a flight recorder dump where the launcher asks for
    one; gloo's own timeout) rather than waiting for the job's time limit."""
    timeout = hang_timeout()
    options = {"timeout": timeout} if timeout else {}
    if device.type == "cuda" and backend in ("auto", "nccl"):
        dist.init_process_group("nccl", device_id=device, **options)
        return "nccl"
    dist.init_process_group("gloo", **options)
    return "gloo"


def cpus() -> dict:
    """The CPUs this rank may run on (its affinity) and the CPUs the node has."""
    allowed = sorted(os.sched_getaffinity(0))
    return {"cpus": len(allowed), "cpu_list": compact(allowed), "node_cpus": os.cpu_count()}


def compact(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


class Heartbeat:
    """This rank's position, printed every few seconds (CERTIFY_HEARTBEAT_S) by a thread of its
    own, also while the rank waits in a collective. The driver names the ranks whose position
    stays behind the others', or that fall silent first: a stopped process prints nothing."""

    def __init__(self) -> None:
        self.interval = float(os.environ.get("CERTIFY_HEARTBEAT_S") or 10)
        self.position = 0
        self.where = "starting"
        self.rank = int(os.environ.get("RANK", "0"))
        self.host = socket.gethostname()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.beat()
        threading.Thread(target=self._run, name="certify-heartbeat", daemon=True).start()

    def advance(self, where: str) -> None:
        self.position += 1
        self.where = where

    def beat(self) -> None:
        with self._lock:
            if not self._stopped.is_set():
                print_marked(HEARTBEAT_MARK, {"r": self.rank, "h": self.host, "p": self.position, "w": self.where})

    def stop(self) -> None:
        """No more beats (before a long result line, which a beat could otherwise cut into)."""
        with self._lock:
            self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            self.beat()


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
