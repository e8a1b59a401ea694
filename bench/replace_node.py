"""Benchmark replace-node against a full apply on the same lab, in one run (figures printed).

1. A bare lab (`provision lab down`, `lab up`), then `provision apply --inventory lab`: the
   full apply's wall time (every role on every node from nothing).
2. gpu02's machine swapped for a bare one (new container and address), then
   `provision replace-node gpu02 --inventory lab`: its wall time, each step's duration from
   replace-node.json, and the ratio to the full apply.

Usage: .venv/bin/python bench/replace_node.py   (takes the lab down first; about 15 minutes)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROVISION = str(Path(sys.executable).parent / "provision")


def timed(*args: str, env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run([PROVISION, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"provision {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from provisioner.lab import cluster

    with tempfile.TemporaryDirectory(prefix="bench-replace-") as scratch:
        env = {**os.environ, "PROVISION_RUNS_DIR": scratch}
        timed("lab", "down", env=env)
        timed("lab", "up", env=env)
        full = timed("apply", "--inventory", "lab", env=env)
        cluster.replace_gpu_node("gpu02", log=lambda message: None)
        replace = timed("replace-node", "gpu02", "--inventory", "lab", env=env)
        record = sorted(Path(scratch).glob("*-replace-node-steps"))[-1]
        steps = json.loads((record / "replace-node.json").read_text())["steps"]
    print(f"full apply (bare lab, {len(cluster.lab_status()) - 1} machines): {full:8.1f} s")
    print(f"replace-node gpu02 (bare machine):              {replace:8.1f} s")
    for step in steps:
        print(f"  {step['name']:<16} {step['duration_s']:8.1f} s")
    print(f"replace-node / full apply: {replace / full:.2f}")


if __name__ == "__main__":
    main()
