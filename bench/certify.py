"""Benchmark the certification, in one run (figures printed, nothing asserted).

1. The torch sweep's own overhead: on this machine, torchrun with RANKS gloo ranks, the sweep
   (payload/sweep.py) against a bare `all_reduce` timing loop at the same sizes and iteration
   counts, alternated REPEATS times; busbw of each and their ratio (median of the repeats).
2. With --lab: `provision certify --inventory lab` wall time, and per part (nccl-tests, sweep,
   smoke training) the time its Slurm jobs took, from certification.json.

Usage: .venv/bin/python bench/certify.py [--ranks 2] [--repeats 3] [--lab]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = ROOT / "provisioner" / "certify" / "payload"
SIZES = [1 << 20, 4 << 20, 16 << 20]
ITERS = 10

BARE_LOOP = """
import json, os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
world, out = dist.get_world_size(), {}
for size in [int(s) for s in sys.argv[1].split(",")]:
    tensor = torch.ones(size // 4)
    for _ in range(5):
        dist.all_reduce(tensor)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(int(sys.argv[2])):
        dist.all_reduce(tensor)
    seconds = (time.perf_counter() - start) / int(sys.argv[2])
    out[size] = size / seconds / 1e9 * 2 * (world - 1) / world
if dist.get_rank() == 0:
    print("BARE " + json.dumps(out))
dist.destroy_process_group()
"""


def torchrun(ranks: int, *args: str) -> str:
    environment = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}", "--master-port=29631",
               *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, env=environment).stdout


def sweep_busbw(ranks: int) -> dict[int, float]:
    output = torchrun(ranks, str(PAYLOAD / "sweep.py"), "--min-bytes", str(SIZES[0]), "--max-bytes",
                      str(SIZES[-1]), "--gradient-bytes", str(SIZES[-1]), "--iters", str(ITERS), "--repeats", "1",
                      "--warmup", "5", "--no-check")
    report = json.loads(output.split("PROVISION-SWEEP ", 1)[1].splitlines()[0])
    return {row["size_bytes"]: row["busbw_gbps"] for row in report["rows"] if row["size_bytes"] in SIZES}


def bare_busbw(ranks: int, script: Path) -> dict[int, float]:
    output = torchrun(ranks, str(script), ",".join(map(str, SIZES)), str(ITERS))
    return {int(k): v for k, v in json.loads(output.split("BARE ", 1)[1].splitlines()[0]).items()}


def instrument_overhead(ranks: int, repeats: int) -> None:
    sweep, bare = defaultdict(list), defaultdict(list)
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "bare_all_reduce.py"
        script.write_text(BARE_LOOP)
        for _ in range(repeats):
            for size, value in sweep_busbw(ranks).items():
                sweep[size].append(value)
            for size, value in bare_busbw(ranks, script).items():
                bare[size].append(value)
    print(f"torch sweep vs bare all_reduce loop, {ranks} gloo ranks on this machine, median of {repeats}:")
    print(f"{'size':>10} {'sweep GB/s':>11} {'bare GB/s':>10} {'sweep/bare':>11}")
    for size in SIZES:
        s, b = statistics.median(sweep[size]), statistics.median(bare[size])
        print(f"{size >> 20:>8}Mi {s:>11.3f} {b:>10.3f} {s / b:>11.3f}")


def lab_certification() -> None:
    with tempfile.TemporaryDirectory() as runs:
        environment = {**os.environ, "PROVISION_RUNS_DIR": runs}
        start = time.monotonic()
        done = subprocess.run([str(Path(sys.executable).parent / "provision"), "certify", "--inventory", "lab"],
                              capture_output=True, text=True, env=environment, check=False)
        wall = time.monotonic() - start
        record = sorted(Path(runs).iterdir())[-1]
        document = json.loads((record / "certification.json").read_text())
    print(f"\nprovision certify on the lab: exit {done.returncode}, {wall:.0f} s wall "
          f"({len(document['jobs'])} Slurm jobs)")
    parts: dict[str, float] = defaultdict(float)
    for job in document["jobs"]:
        if job["start"] and job["end"]:
            began, ended = (datetime.fromisoformat(job[k]) for k in ("start", "end"))
            parts[job["instrument"]] += (ended - began).total_seconds()
    for part, seconds in parts.items():
        print(f"  {part:<11} {seconds:6.1f} s")
    print(f"  other (Ansible, preconditions, reports) {wall - sum(parts.values()):6.1f} s")
    training = document["training"]
    print(f"  smoke training: {training['steps_done']} steps, {training['tokens_per_second']:.0f} tokens/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lab", action="store_true", help="also certify the running lab")
    args = parser.parse_args()
    instrument_overhead(args.ranks, args.repeats)
    if args.lab:
        lab_certification()


if __name__ == "__main__":
    main()
