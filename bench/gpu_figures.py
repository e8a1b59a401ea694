#!/usr/bin/env python3
"""The figures of bench/gpu.sh's steps, one line each, from the outputs the steps left.

Standard library only, with the project's nccl-tests parser loaded from its file alone (the
GPU machine has none of the CLI's packages: no rich, pydantic or ansible-runner). Exit status
0 when the step's result passes, 1 when it does not.

Usage: gpu_figures.py training|sweep|fault|nccl-tests OUTPUT [EXPECTED_BACKEND]
"""
from __future__ import annotations

import json
import statistics
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def marked(path: str, mark: str) -> dict:
    """The JSON of the first line of the file that starts with mark."""
    for line in Path(path).read_text(errors="replace").splitlines():
        if line.startswith(mark):
            return json.loads(line[len(mark):])
    raise SystemExit(f"no {mark.strip()} line in {path}")


def nccl_tests_parser():
    """provisioner.parsers.nccl_tests without the package's __init__ modules (which import
    the other parsers and the CLI's dependencies)."""
    for name, folder in (("provisioner", ROOT / "provisioner"), ("provisioner.parsers", ROOT / "provisioner/parsers")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules.setdefault(name, package)
    from provisioner.parsers.nccl_tests import parse_nccl_tests
    return parse_nccl_tests


def training(path: str) -> bool:
    facts = marked(path, "PROVISION-TRAIN ")
    loss, times = facts["series"]["mean_loss"], facts["series"]["step_time_s"]
    head, tail = statistics.fmean(loss[:10]), statistics.fmean(loss[-max(1, len(loss) // 10):])
    drop = 1 - tail / head
    steady = sorted(times[facts["warmup_steps"]:]) or sorted(times)
    p99 = steady[min(len(steady) - 1, int(0.99 * len(steady)))]
    if facts["mfu"] is not None:
        mfu = f"MFU {facts['mfu']:.1%} of the {facts['peak_tflops']:g} TFLOP/s dense bf16 peak"
    else:
        mfu = f"MFU unknown (no peak for {facts['device_name']})"
    print(f"{facts['device_name']}, {facts['parameters'] / 1e9:.2f} B parameters, bf16 {facts['bf16']}, "
          f"{facts['steps_done']}/{facts['steps_requested']} steps: {mfu} "
          f"({facts['flops_per_token'] / 1e9:.2f} GFLOP per token, causal attention), "
          f"{facts['tokens_per_second']:.0f} tokens/s over the {facts['steady_steps']} steps after "
          f"{facts['warmup_steps']} warm-up steps, loss {head:.3f} -> {tail:.3f} (drop {drop:.1%}, preset asks "
          f"{facts['loss_drop_min']:.0%}), step time p50 {statistics.median(steady) * 1000:.1f} ms p99 "
          f"{p99 * 1000:.1f} ms, startup {facts['elapsed_s'] - facts['steady_s']:.1f} s, torch NCCL "
          f"{facts['ranks'][0].get('nccl_version')}")
    return facts["violation"] is None and facts["steps_done"] == facts["steps_requested"] \
        and drop >= facts["loss_drop_min"]


def sweep(path: str, backend: str) -> bool:
    facts = marked(path, "PROVISION-SWEEP ")
    wrong = sum(row["wrong"] or 0 for row in facts["rows"])
    print(f"{facts['backend']}, {facts['ranks']} rank(s), {facts['dtype']}: "
          + ", ".join(f"{row['size_bytes'] >> 20} MiB {row['time_us']:.0f} us" for row in facts["rows"])
          + f"; wrong elements {wrong}")
    return wrong == 0 and facts["backend"] == backend


def fault(path: str) -> bool:
    facts = marked(path, "PROVISION-TRAIN ")
    violation = facts["violation"] or {}
    print(f"{facts['backend']} on {', '.join(rank['device'] for rank in facts['ranks'])}: {violation.get('check')} "
          f"at step {violation.get('step')} on ranks {violation.get('ranks')}, {facts['steps_done']} steps run")
    # Two ranks cannot outvote each other: both are named, at the step of the fault.
    return (violation.get("check"), violation.get("step")) == ("grad_norm_consistency", 5) \
        and 1 in violation.get("ranks", [])


def nccl_tests(path: str) -> bool:
    facts = nccl_tests_parser()(Path(path).read_text(errors="replace"))
    rows = facts["rows"]
    wrong = sum(row[place]["wrong"] or 0 for row in rows for place in ("out_of_place", "in_place"))
    last = rows[-1]["out_of_place"]
    print(f"{facts['ranks']} rank, NCCL {facts['nccl_version']}, nccl-tests {facts['nccl_tests_version']}: "
          f"{len(rows)} sizes, {rows[-1]['size_bytes'] >> 20} MiB in {last['time_us']:.0f} us (algbw "
          f"{last['algbw_gbps']} GB/s), wrong {wrong}")
    return wrong == 0 and bool(rows)


def main() -> int:
    step, path = sys.argv[1], sys.argv[2]
    if step == "training":
        passed = training(path)
    elif step == "sweep":
        passed = sweep(path, sys.argv[3] if len(sys.argv) > 3 else "nccl")
    elif step == "fault":
        passed = fault(path)
    elif step == "nccl-tests":
        passed = nccl_tests(path)
    else:
        raise SystemExit(f"unknown step {step}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
