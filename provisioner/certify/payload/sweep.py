#!/usr/bin/env python3
"""All-reduce bandwidth sweep with torch.distributed, reported as nccl-tests reports it.

Runs under torchrun on every rank (NCCL on GPUs, gloo on CPU). For each message size it
checks the result (every element exactly the sum of the ranks' values, chosen so that the sum
is exact in the message's type at any rank count: see check_values), warms up,
then times `--iters` all-reduces `--repeats` times; the median repeat is reported.
algbw = size / time, busbw = algbw x 2(n-1)/n (nccl-tests' all_reduce correction).
Rank 0 prints one line `PROVISION-SWEEP <json>`. Runs on the nodes: standard library and
torch only.
"""
from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
from rank_device import Heartbeat, cpus, device_for_rank, finish, init_group, print_marked, synchronize

DTYPES = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}


def parse_size(text: str) -> int:
    """'1M' -> 1048576; plain numbers are bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text[-1:] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def sizes_between(minimum: int, maximum: int, extra: list[int]) -> list[int]:
    """Powers of two from minimum to maximum, plus the extra sizes (e.g. the gradient size)."""
    sizes, size = set(extra), minimum
    while size <= maximum:
        sizes.add(size)
        size *= 2
    return sorted(sizes)


def check_values(dtype: torch.dtype, rank: int, world: int) -> tuple[float, float]:
    """What this rank contributes and the exact sum every element must then hold.

    A type holds every integer up to 2^(mantissa bits + 1): float32 2^24, float16 2048,
    bfloat16 256. Where n(n+1)/2 fits, each rank adds rank+1 (a rank whose data went wrong
    shifts the sum by its own amount). Otherwise each of every k-th rank adds 1 and the others
    0, k the smallest stride that keeps the sum within the exact integers: every partial sum is
    then an exact integer, in any reduction order, and a corrupted contribution still shows.
    """
    exact_up_to = 2 ** (round(-math.log2(torch.finfo(dtype).eps)) + 1)
    if world * (world + 1) // 2 <= exact_up_to:
        return float(rank + 1), float(world * (world + 1) // 2)
    stride = -(-world // exact_up_to)
    return (1.0 if rank % stride == 0 else 0.0), float(-(-world // stride))


def wrong_elements(tensor: torch.Tensor, world: int) -> int:
    """Fill with this rank's value, all-reduce, count elements that are not the exact sum."""
    value, expected = check_values(tensor.dtype, dist.get_rank(), world)
    tensor.fill_(value)
    dist.all_reduce(tensor)
    return int((tensor != expected).sum().item())


def time_all_reduce(tensor: torch.Tensor, iters: int, device: torch.device) -> float:
    """Seconds per all-reduce, averaged over `iters` back-to-back operations."""
    dist.barrier()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    synchronize(device)
    return (time.perf_counter() - start) / iters


def measure(size: int, dtype: torch.dtype, args: argparse.Namespace, device: torch.device,
            heartbeat: Heartbeat) -> dict:
    world = dist.get_world_size()
    element = torch.tensor([], dtype=dtype).element_size()
    count = max(1, size // element)
    tensor = torch.empty(count, dtype=dtype, device=device)
    heartbeat.advance(f"{size} B data check")
    wrong = wrong_elements(tensor, world) if args.check else None
    heartbeat.advance(f"{size} B warm-up")
    for _ in range(args.warmup):
        dist.all_reduce(tensor)
    seconds = []
    for repeat in range(args.repeats):
        heartbeat.advance(f"{size} B repeat {repeat + 1}")
        seconds.append(time_all_reduce(tensor, args.iters, device))
    median = statistics.median(seconds)
    factor = 2 * (world - 1) / world
    algbw = count * element / median / 1e9
    return {"size_bytes": count * element, "count": count, "time_us": round(median * 1e6, 2),
            "algbw_gbps": round(algbw, 4), "busbw_gbps": round(algbw * factor, 4),
            "repeats_busbw_gbps": [round(count * element / s / 1e9 * factor, 4) for s in seconds],
            "wrong": wrong}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-bytes", default="1M")
    parser.add_argument("--max-bytes", default="8G")
    parser.add_argument("--gradient-bytes", default="8G", help="always measured: the model's gradient size")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-check", dest="check", action="store_false")
    parser.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                        help="auto: NCCL on GPUs, gloo on the CPU; gloo on GPUs lets ranks share one (testing)")
    parser.add_argument("--require-cuda", action="store_true",
                        help="the node has GPUs: refuse to run on the CPU (a rank without a GPU fails)")
    args = parser.parse_args()
    if args.repeats < 1 or args.iters < 1:
        parser.error("--repeats and --iters must be at least 1")
    heartbeat = Heartbeat()
    device = device_for_rank(args.require_cuda)
    heartbeat.advance("joining the process group")
    backend = init_group(device, args.backend)
    heartbeat.advance("process group ready")
    mine = {"rank": dist.get_rank(), "host": socket.gethostname(),
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")), **cpus()}
    everyone: list[dict | None] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    sizes = sizes_between(parse_size(args.min_bytes), parse_size(args.max_bytes), [parse_size(args.gradient_bytes)])
    rows = [measure(size, DTYPES[args.dtype], args, device, heartbeat) for size in sizes]
    heartbeat.stop()
    dist.barrier()
    if dist.get_rank() == 0:
        report = {"collective": "all_reduce", "backend": backend, "ranks": dist.get_world_size(),
                  "hosts": sorted({rank["host"] for rank in everyone if rank}), "dtype": args.dtype,
                  "iters": args.iters, "repeats": args.repeats, "rows": rows, "rank_cpus": everyone}
        print_marked("PROVISION-SWEEP ", report)
    finish()


if __name__ == "__main__":
    main()
