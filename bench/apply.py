"""Benchmark `provision apply` on the lab, in one run (figures printed, nothing asserted).

1. fresh lab nodes, then the full first apply;
2. a no-op re-apply (must report changed=0);
3. the wrapper's overhead: `provision apply` against bare `ansible-playbook` on the same
   playbook and inventory, alternated REPEATS times; the ratio of the medians is the figure.

Usage: .venv/bin/python bench/apply.py [--nodes 2] [--gpus 8] [--repeats 3] [--keep-lab]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from provisioner.lab import cluster  # noqa: E402
from provisioner.records import read_summary  # noqa: E402
from provisioner.runner import ansible_environment  # noqa: E402

BIN = Path(sys.executable).parent


def timed(command: list[str], environment: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started, result.returncode


def latest_summary(runs: Path) -> dict:
    return read_summary(sorted(runs.iterdir())[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep-lab", action="store_true", help="reuse the running lab (no fresh nodes)")
    args = parser.parse_args()

    runs = Path(tempfile.mkdtemp(prefix="bench-runs-"))
    environment = {**os.environ, **ansible_environment(), "PROVISION_RUNS_DIR": str(runs)}
    inventory = cluster.lab_inventory_dir()
    provision = [str(BIN / "provision"), "apply", "--inventory", str(inventory)]
    plain = [str(BIN / "ansible-playbook"), "-i", str(inventory / "hosts.yml"), str(ROOT / "playbooks" / "site.yml")]

    if not args.keep_lab:
        cluster.lab_down(log=lambda message: None)
    started = time.perf_counter()
    cluster.lab_up(args.nodes, args.gpus, log=lambda message: None)
    lab_seconds = time.perf_counter() - started

    first_seconds, code = timed(provision, environment)
    first = latest_summary(runs)
    noop_seconds, noop_code = timed(provision, environment)
    noop = latest_summary(runs)
    if code != 0 or noop_code != 0:
        print(f"apply failed (exit {code}, {noop_code}); see {runs}", file=sys.stderr)
        return 1

    wrapper_times, plain_times = [], []
    for _ in range(args.repeats):
        plain_times.append(timed(plain, environment)[0])
        wrapper_times.append(timed(provision, environment)[0])
    wrapper, bare = statistics.median(wrapper_times), statistics.median(plain_times)
    host_tasks = sum(h["ok"] + h["skipped"] + h["failed"] for h in noop["hosts"].values())

    figures = {
        "nodes": args.nodes + 1,
        "lab_up_s": round(lab_seconds, 2),
        "first_apply_s": round(first_seconds, 2),
        "first_apply_changed": first["totals"]["changed"],
        "noop_apply_s": round(noop_seconds, 2),
        "noop_apply_changed": noop["totals"]["changed"],
        "noop_s_per_host_task": round(noop_seconds / max(host_tasks, 1), 4),
        "wrapper_median_s": round(wrapper, 2),
        "plain_ansible_playbook_median_s": round(bare, 2),
        "wrapper_overhead_ratio": round(wrapper / bare, 3),
        "repeats": args.repeats,
    }
    width = max(len(key) for key in figures)
    for key, value in figures.items():
        print(f"{key.ljust(width)}  {value}")
    print("idempotent: yes (changed=0)" if noop["totals"]["changed"] == 0 else "idempotent: NO")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
