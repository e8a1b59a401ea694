"""Benchmark `provision apply` on the lab, in one run (figures printed, nothing asserted).

1. fresh lab nodes, then the full first apply;
2. a no-op re-apply (must report changed=0);
3. the wrapper's overhead: `provision apply` against bare `ansible-playbook` on the same
   playbook and inventory, alternated REPEATS times; the ratio of the medians is the figure.
   Beside it: the median of the per-pair ratios (each wrapper run against the bare run just
   before it, so a slow spell of the machine lands on both), their range, and the same two
   runs' CPU seconds (the process and all its children: ansible-playbook, its workers, ssh),
   which the machine's speed swings move less than wall time, and a bootstrap 90 % interval of
   the per-pair ratios' median (resampled pairs, fixed seed): where that interval's top is
   under a bound, the overhead is under it on more than this run's luck;
4. with --baseline REV: the no-op `provision apply` of that revision (a git worktree, its own
   playbooks, roles, filters, package and Ansible strategy) against this tree's, alternated
   REPEATS times on the same lab; the ratio of the medians is the speed-up figure. The two
   trees word a few files differently, so before each timed no-op the tree converges the lab
   with an untimed apply (its changed count printed); the timed run must change nothing.

Usage: .venv/bin/python bench/apply.py [--nodes 2] [--gpus 8] [--repeats 5] [--keep-lab] [--baseline REV]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from provisioner.ansible.records import read_summary  # noqa: E402
from provisioner.ansible.runner import ansible_environment  # noqa: E402
from provisioner.lab import cluster  # noqa: E402

BIN = Path(sys.executable).parent


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], environment: dict[str, str]) -> tuple[float, int, float]:
    """Wall seconds, exit code and CPU seconds (the command and every child it waited for)."""
    cpu, started = children_cpu_seconds(), time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started, result.returncode, children_cpu_seconds() - cpu


def median_interval(values: list[float], level: float = 0.90, draws: int = 10_000) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of `values` (seeded: the same runs give the same figure)."""
    sampler = random.Random(0)
    medians = sorted(statistics.median(sampler.choices(values, k=len(values))) for _ in range(draws))
    tail = (1 - level) / 2
    return medians[int(tail * draws)], medians[int((1 - tail) * draws) - 1]


def latest_summary(runs: Path) -> dict:
    return read_summary(sorted(runs.iterdir())[-1])


def host_task_count(summary: dict) -> int:
    return sum(h["ok"] + h["skipped"] + h["failed"] for h in summary["hosts"].values())


def baseline_tree(revision: str) -> Path:
    """A worktree of `revision` beside this one (removed at exit by the caller)."""
    target = Path(tempfile.mkdtemp(prefix="bench-baseline-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(target), revision], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return target


def compare_with_baseline(revision: str, repeats: int, inventory: Path, runs: Path,
                          environment: dict[str, str]) -> dict:
    """Median no-op `provision apply` of `revision` and of this tree, alternated on one lab."""
    tree = baseline_tree(revision)
    try:
        # The revision runs as it shipped: with its own strategy and plugins, not this tree's.
        this_trees = ansible_environment().keys() - {"PATH"}
        inherited = {key: value for key, value in environment.items() if key not in this_trees}
        baseline_environment = {**inherited, "PYTHONPATH": str(tree),
                                "ANSIBLE_CONFIG": str(tree / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(tree / "roles")}
        baseline = [sys.executable, "-m", "provisioner.cli", "apply", "--inventory", str(inventory)]
        current = [str(BIN / "provision"), "apply", "--inventory", str(inventory)]
        times: dict[str, list[float]] = {"baseline": [], "current": []}
        converged: dict[str, list[int]] = {"baseline": [], "current": []}
        changed: dict[str, list[int]] = {"baseline": [], "current": []}
        tasks: dict[str, int] = {}
        for _ in range(repeats):
            for name, command, env, cwd in (("baseline", baseline, baseline_environment, tree),
                                            ("current", current, environment, ROOT)):
                for timed_run in (False, True):
                    started = time.perf_counter()
                    code = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, check=False).returncode
                    elapsed = time.perf_counter() - started
                    summary = latest_summary(runs)
                    if code != 0:
                        raise RuntimeError(f"{name} apply failed (exit {code}); see {runs}")
                    if not timed_run:
                        converged[name].append(summary["totals"]["changed"])
                        continue
                    times[name].append(elapsed)
                    changed[name].append(summary["totals"]["changed"])
                    tasks[name] = host_task_count(summary)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    old, new = statistics.median(times["baseline"]), statistics.median(times["current"])
    return {"baseline_revision": revision, "baseline_noop_median_s": round(old, 2),
            "current_noop_median_s": round(new, 2), "noop_ratio_current_to_baseline": round(new / old, 3),
            "baseline_host_tasks": tasks["baseline"], "current_host_tasks": tasks["current"],
            "baseline_converge_changed": converged["baseline"], "current_converge_changed": converged["current"],
            "baseline_noop_changed": changed["baseline"], "current_noop_changed": changed["current"],
            "baseline_noop_s": [round(t, 1) for t in times["baseline"]],
            "current_noop_s": [round(t, 1) for t in times["current"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep-lab", action="store_true", help="reuse the running lab (no fresh nodes)")
    parser.add_argument("--baseline", help="a git revision whose no-op apply to compare with, side by side")
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

    first_seconds, code, _ = timed(provision, environment)
    first = latest_summary(runs)
    noop_seconds, noop_code, _ = timed(provision, environment)
    noop = latest_summary(runs)
    if code != 0 or noop_code != 0:
        print(f"apply failed (exit {code}, {noop_code}); see {runs}", file=sys.stderr)
        return 1

    wrapper_times, plain_times, wrapper_cpu, plain_cpu = [], [], [], []
    for _ in range(args.repeats):
        for times, cpu, command in ((plain_times, plain_cpu, plain), (wrapper_times, wrapper_cpu, provision)):
            seconds, exit_code, cpu_seconds = timed(command, environment)
            if exit_code != 0:
                print(f"{command[0]} failed (exit {exit_code}); see {runs}", file=sys.stderr)
                return 1
            times.append(seconds)
            cpu.append(cpu_seconds)
    wrapper, bare = statistics.median(wrapper_times), statistics.median(plain_times)
    wrapper_cpu_s, plain_cpu_s = statistics.median(wrapper_cpu), statistics.median(plain_cpu)
    pair_ratios = [w / p for w, p in zip(wrapper_times, plain_times, strict=True)]
    host_tasks = host_task_count(noop)

    figures = {
        "nodes": args.nodes + 1,
        "strategy": environment["ANSIBLE_STRATEGY"],
        "lab_up_s": round(lab_seconds, 2),
        "first_apply_s": round(first_seconds, 2),
        "first_apply_changed": first["totals"]["changed"],
        "noop_apply_s": round(noop_seconds, 2),
        "noop_apply_changed": noop["totals"]["changed"],
        "noop_s_per_host_task": round(noop_seconds / max(host_tasks, 1), 4),
        "wrapper_median_s": round(wrapper, 2),
        "plain_ansible_playbook_median_s": round(bare, 2),
        "wrapper_overhead_ratio": round(wrapper / bare, 3),
        "wrapper_pair_ratio_median": round(statistics.median(pair_ratios), 3),
        "wrapper_pair_ratio_range": [round(min(pair_ratios), 3), round(max(pair_ratios), 3)],
        "wrapper_pair_ratio_median_90pct": [round(bound, 3) for bound in median_interval(pair_ratios)],
        "wrapper_cpu_median_s": round(wrapper_cpu_s, 2),
        "plain_cpu_median_s": round(plain_cpu_s, 2),
        "wrapper_cpu_ratio": round(wrapper_cpu_s / plain_cpu_s, 3),
        "wrapper_s": [round(t, 1) for t in wrapper_times],
        "plain_s": [round(t, 1) for t in plain_times],
        "repeats": args.repeats,
    }
    if args.baseline:
        figures.update(compare_with_baseline(args.baseline, args.repeats, inventory, runs, environment))
    width = max(len(key) for key in figures)
    for key, value in figures.items():
        print(f"{key.ljust(width)}  {value}")
    print("idempotent: yes (changed=0)" if noop["totals"]["changed"] == 0 else "idempotent: NO")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
