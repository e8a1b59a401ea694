"""Benchmark `provision upgrade` on the lab: the time a rolling driver upgrade takes per node.

The lab's driver pin is moved to the repository's other driver and the whole fleet upgraded
(one node per batch), then moved back and upgraded again; for each run the figures per node
and per step are printed from the run's `upgrade.json`. Nothing is asserted. The lab must
be up and provisioned (`provision lab up && provision apply --inventory lab`); it ends at the
driver it started with.

Usage: .venv/bin/python bench/upgrade.py [--steps 200]
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

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from provisioner.lab import cluster  # noqa: E402
from provisioner.lab.apt_repo import DRIVERS  # noqa: E402

BIN = Path(sys.executable).parent


def set_driver_pin(version: str) -> str:
    path = cluster.lab_inventory_dir() / "group_vars" / "all.yml"
    document = yaml.safe_load(path.read_text())
    previous = document["gpu_driver_version"]
    document["gpu_driver_version"] = version
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return previous


def rollout(version: str, steps: int, runs: Path) -> dict:
    set_driver_pin(version)
    started = time.perf_counter()
    code = subprocess.run([str(BIN / "provision"), "upgrade", "--inventory", str(cluster.lab_inventory_dir()),
                           "--reason", f"bench: driver {version}", "--steps", str(steps)], cwd=ROOT,
                          env={**os.environ, "PROVISION_RUNS_DIR": str(runs)}, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode
    seconds = time.perf_counter() - started
    record = sorted(p for p in runs.iterdir() if p.name.endswith("-upgrade-steps"))[-1]
    document = json.loads((record / "upgrade.json").read_text())
    per_node = {node: round(sum(step["duration_s"] for step in entry["steps"]), 1)
                for node, entry in document["nodes"].items()}
    per_step: dict[str, list[float]] = {}
    for entry in document["nodes"].values():
        for step in entry["steps"]:
            per_step.setdefault(step["name"], []).append(step["duration_s"])
    return {"driver": version, "exit_code": code, "result": document.get("result"), "total_s": round(seconds, 1),
            "per_node_s": per_node, "median_per_node_s": round(statistics.median(per_node.values()), 1)
            if per_node else None,
            "median_per_step_s": {name: round(statistics.median(values), 1) for name, values in per_step.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="smoke-training steps of each certification")
    args = parser.parse_args()
    path = cluster.lab_inventory_dir() / "group_vars" / "all.yml"
    first = yaml.safe_load(path.read_text())["gpu_driver_version"]
    other = next(version for version in DRIVERS if version != first)
    runs = Path(tempfile.mkdtemp(prefix="bench-upgrade-runs-"))
    figures = [rollout(other, args.steps, runs), rollout(first, args.steps, runs)]
    for run in figures:
        print(f"driver {run['driver']}: exit {run['exit_code']} ({run['result']}), {run['total_s']} s in all; "
              f"per node {run['per_node_s']} (median {run['median_per_node_s']} s)")
        print("  median per step: " + ", ".join(f"{name} {s} s" for name, s in run["median_per_step_s"].items()))
    print(json.dumps(figures))
    return 0 if all(run["exit_code"] == 0 for run in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
