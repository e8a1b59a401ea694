"""The node-side instruments run for real: torchrun with gloo on this machine (no lab needed)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from provisioner.certify import criteria
from provisioner.certify.jobs import read_output
from provisioner.certify.profiles import thresholds

PAYLOAD = Path(__file__).resolve().parents[2] / "provisioner" / "certify" / "payload"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(script: str, ranks: int, *args: str) -> str:
    environment = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
               f"--master-port={free_port()}",
               str(PAYLOAD / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_sweep_reports_nccl_tests_compatible_rows():
    facts = read_output("sweep", torchrun("sweep.py", 2, "--min-bytes", "256K", "--max-bytes", "1M",
                                          "--gradient-bytes", "768K", "--iters", "3", "--repeats", "3"))
    assert facts["ranks"] == 2 and facts["backend"] == "gloo"
    assert [row["size_bytes"] for row in facts["rows"]] == [262144, 524288, 786432, 1048576]
    for row in facts["rows"]:
        assert row["wrong"] == 0 and len(row["repeats_busbw_gbps"]) == 3
        assert row["busbw_gbps"] == row["algbw_gbps"]  # 2(n-1)/n = 1 for two ranks
        assert abs(row["algbw_gbps"] - row["size_bytes"] / row["time_us"] / 1e3) < 0.01 * row["algbw_gbps"] + 1e-3


def test_smoke_training_learns_and_its_ranks_agree():
    output = torchrun("smoke_train.py", 2, "--preset", "tiny", "--steps", "150")
    judge = criteria.Criteria(thresholds=thresholds("lab-cpu", "", 0, 400, None), gradient_bytes=1,
                              step_time_cv_max=10.0, loss_drop_min=0.3, warmup_steps=10)
    result = {"name": "t", "instrument": "train", "scope": "training", "nodes": ["h"], "rc": 0, "stdout": output}
    checks, summary = criteria.training_checks(result, ["h"], judge)
    assert all(check.passed for check in checks), [c for c in checks if not c.passed]
    assert summary["steps_done"] == 150 and summary["ranks"] == 2


def test_perturbed_gradients_stop_the_training_naming_the_rank():
    output = torchrun("smoke_train.py", 3, "--steps", "100", "--inject-grad-fault", "1", "--inject-at-step", "5")
    ranks = json.loads(output.split("PROVISION-TRAIN ", 1)[1].splitlines()[0])["ranks"]
    violation = ranks[0]["violation"]
    assert violation["check"] == "grad_norm_consistency" and violation["step"] == 5 and violation["ranks"] == [1]
    assert all(rank["steps_done"] == 6 for rank in ranks)
    assert ranks[0]["parameter_checksums"][1] != ranks[0]["parameter_checksums"][0]
