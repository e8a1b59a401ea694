"""Benchmark the certification, in one run (figures printed, nothing asserted).

1. At scale, on paper: `provision certify --dry-run`'s rounds and estimate for 16 to 1,024
   8 x H100 NDR nodes (communication, and a 1,000-step training of the 1b preset), with the
   per-job durations derived from published nccl-tests runs (provisioner/certify/profiles.py
   cites them), beside what the old schedule (every node, all nodes and every pair, three
   repeats, one job after the other) would have taken at the same durations.
2. With --lab: `provision certify --inventory lab` on the lab with 2 GPU nodes, then with 4
   (the lab grown and provisioned between, not timed), side by side on this machine: wall times,
   their ratio, and each round's duration. The lab is given back its 2 nodes at the end.
3. With --sweep: the torch sweep's own overhead against a bare all_reduce loop (gloo, here).

Usage: .venv/bin/python bench/certify.py [--lab] [--sweep]   (--lab: about 20 minutes)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROVISION = str(Path(sys.executable).parent / "provision")
PAYLOAD = ROOT / "provisioner" / "certify" / "payload"
SIZES = [1 << 20, 4 << 20, 16 << 20]
ITERS = 10
FLEETS = [16, 64, 128, 512, 1024]

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


def at_scale() -> None:
    from provisioner.certify.profiles import durations_s
    from provisioner.certify.schedule import base_rounds, estimate_s

    print("certification of 8 x H100 NDR nodes, on paper (communication and a 1,000-step 1b training):")
    print(f"{'nodes':>6} {'rounds':>7} {'jobs':>6} {'nccl-tests':>10} {'sweep':>6} {'train':>6} "
          f"{'estimate':>9} {'old schedule':>13} {'old jobs':>9}")
    source = ""
    for nodes in FLEETS:
        names = [f"gpu{n:04d}" for n in range(nodes)]
        durations, source = durations_s(None, "1b", nodes, 1000)
        rounds = base_rounds(names, ("communication", "training"), 8, 3, ["--steps", "1000"])
        jobs = sum(len(r.jobs) for r in rounds)
        estimate = estimate_s(rounds, durations)
        # The old plan: each node, all nodes and every pair, nccl-tests three times and the sweep
        # once each, one job after the other, then the training.
        scopes = nodes + 1 + math.comb(nodes, 2)
        old = scopes * (3 * durations["nccl-tests"] + durations["sweep"]) + durations["train"]
        print(f"{nodes:>6} {len(rounds):>7} {jobs:>6} {durations['nccl-tests']:>9.1f}s {durations['sweep']:>5.0f}s "
              f"{durations['train']:>5.0f}s {estimate / 60:>7.1f} min {old / 3600:>10.1f} h {scopes * 4 + 1:>9}")
    print(f"  per-job durations: {source}")
    print("  a failure adds localisation rounds: at most about log2(nodes) + 3 (tests/unit/test_certify_schedule.py)")


def _provision(*args: str, env: dict[str, str]) -> tuple[int, float]:
    started = time.monotonic()
    done = subprocess.run([PROVISION, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return done.returncode, time.monotonic() - started


def _certify(env: dict[str, str], runs: Path) -> tuple[float, dict]:
    code, wall = _provision("certify", "--inventory", "lab", env=env)
    record = sorted(runs.glob("*-certify"))[-1]
    document = json.loads((record / "certification.json").read_text())
    if code != 0:
        print(f"  (exit {code}: {', '.join(n for n, v in document['node_verdicts'].items() if not v['certified'])} "
              "not certified)")
    return wall, document


def lab_side_by_side() -> None:
    from provisioner.lab import cluster

    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench-certify-") as scratch:
        env = {**os.environ, "PROVISION_RUNS_DIR": scratch}
        for nodes in (2, 4):
            cluster.lab_up(nodes, 8, log=lambda message: None, reset_state=False)
            code, _ = _provision("apply", "--inventory", "lab", env=env)
            if code != 0:
                sys.exit(f"provision apply on the {nodes}-node lab failed ({code})")
            figures[nodes] = _certify(env, Path(scratch))
        cluster.lab_up(2, 8, log=lambda message: None, reset_state=False)
        _provision("apply", "--inventory", "lab", "--tags", "slurm,monitoring", env=env)
    two, four = figures[2][0], figures[4][0]
    print(f"\nprovision certify on the lab (2 ranks per node on gloo, 1,000-step tiny training), this machine "
          f"({os.cpu_count()} CPUs):")
    print(f"  2 GPU nodes: {two:6.1f} s   4 GPU nodes: {four:6.1f} s   ratio 4/2: {four / two:.2f}")
    for nodes, (_, document) in figures.items():
        rounds = ", ".join(f"{r['name']} {r['duration_s']:.0f} s" for r in document["rounds"])
        print(f"  {nodes} nodes, {len(document['rounds'])} rounds: {rounds}")
    per_round = defaultdict(dict)
    for nodes, (_, document) in figures.items():
        for r in document["rounds"]:
            per_round[r["name"]][nodes] = r["duration_s"]
    print("  per round, 4 nodes against 2 (the lab's nodes share this machine's CPUs):")
    for name, values in per_round.items():
        if 2 in values and 4 in values:
            print(f"    {name:<28} {values[2]:6.1f} s {values[4]:6.1f} s  x{values[4] / values[2]:.2f}")


STAND_IN_SRUN = """#!/bin/bash
# bench stand-in for srun: one job's output, heartbeats of 8 ranks every 2 s for 30 s, a sweep result
node=${3#--nodelist=}
printf 'PROVISION-START {"host": "%s", "task": 0}\\n' "$node"
for tick in $(seq 0 15); do
  for rank in 0 1 2 3 4 5 6 7; do
    printf 'PROVISION-HEARTBEAT {"r": %s, "h": "%s", "p": %s, "w": "step %s compute"}\\n' $rank "$node" $tick $tick
  done
  sleep 2
done
printf 'PROVISION-SWEEP {"rows": [{"size_bytes": 1048576, "busbw_gbps": 400.0, "wrong": 0}]}\\n'
"""


def driver_scale(jobs: int) -> None:
    import resource

    from provisioner.certify.driver import Driver, Plan
    from provisioner.certify.schedule import Job, Round

    with tempfile.TemporaryDirectory(prefix="bench-driver-") as scratch:
        bin_dir = Path(scratch) / "bin"
        bin_dir.mkdir()
        (bin_dir / "srun").write_text(STAND_IN_SRUN)
        (bin_dir / "srun").chmod(0o755)
        (bin_dir / "sinfo").write_text("#!/bin/sh\n")
        (bin_dir / "sinfo").chmod(0o755)
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
        nodes = [f"gpu{n:04d}" for n in range(jobs)]
        plan = Plan(run_id="bench", nodes=nodes, parts=["communication"], ranks_per_node=8, repeats=1,
                    training_args=[], limits={"intra_node_gbps": 1.0, "inter_node_gbps": 1.0},
                    gradient_bytes=1 << 20, straggler_percent=10, hang_timeout_s=300, heartbeat_s=2,
                    settings={"procs_per_node": 8, "time_limit": "0:10:00"}, max_concurrent=jobs)
        driver = Driver(Path(scratch), plan)
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        outcomes = driver.run_round(Round("bench", "base", [Job("sweep", "node", [node]) for node in nodes]))
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = jobs * (1 + 8 * 16 + 1)
    print(f"\nthe driver with {jobs} jobs at once (stand-in srun, 30 s each, {lines:,} lines of output):")
    print(f"  round wall time {wall:.1f} s against the jobs' 30 s; driver CPU {cpu:.1f} s "
          f"({cpu / wall:.0%} of one core); {sum(o.status == 'ok' for o in outcomes)}/{jobs} jobs ok")


def torchrun(ranks: int, *args: str) -> str:
    environment = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}", "--master-port=29631",
               *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, env=environment).stdout


def sweep_overhead(ranks: int, repeats: int) -> None:
    sweep, bare = defaultdict(list), defaultdict(list)
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "bare_all_reduce.py"
        script.write_text(BARE_LOOP)
        for _ in range(repeats):
            output = torchrun(ranks, str(PAYLOAD / "sweep.py"), "--min-bytes", str(SIZES[0]), "--max-bytes",
                              str(SIZES[-1]), "--gradient-bytes", str(SIZES[-1]), "--iters", str(ITERS),
                              "--repeats", "1", "--warmup", "5", "--no-check")
            report = json.loads(output.split("PROVISION-SWEEP ", 1)[1].splitlines()[0])
            for row in report["rows"]:
                if row["size_bytes"] in SIZES:
                    sweep[row["size_bytes"]].append(row["busbw_gbps"])
            output = torchrun(ranks, str(script), ",".join(map(str, SIZES)), str(ITERS))
            for size, value in json.loads(output.split("BARE ", 1)[1].splitlines()[0]).items():
                bare[int(size)].append(value)
    print(f"\ntorch sweep vs bare all_reduce loop, {ranks} gloo ranks on this machine, median of {repeats}:")
    print(f"{'size':>10} {'sweep GB/s':>11} {'bare GB/s':>10} {'sweep/bare':>11}")
    for size in SIZES:
        s, b = statistics.median(sweep[size]), statistics.median(bare[size])
        print(f"{size >> 20:>8}Mi {s:>11.3f} {b:>10.3f} {s / b:>11.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", action="store_true", help="certify the lab at 2 and at 4 GPU nodes")
    parser.add_argument("--sweep", action="store_true", help="the torch sweep's overhead on this machine")
    parser.add_argument("--driver", type=int, nargs="?", const=1000, metavar="JOBS",
                        help="the driver's own cost with this many jobs at once (a stand-in srun)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    at_scale()
    if args.lab:
        lab_side_by_side()
    if args.driver:
        driver_scale(args.driver)
    if args.sweep:
        sweep_overhead(args.ranks, args.repeats)


if __name__ == "__main__":
    main()
