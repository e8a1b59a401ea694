"""bench/gpu.sh proven on a CPU machine before a GPU is lent: its dry run runs every step that
can run without a GPU and prints the build and run lines of the others."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_bench_dry_run_passes_on_the_cpu(tmp_path: Path):
    environment = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)}
    done = subprocess.run([str(ROOT / "bench/gpu.sh"), "--dry-run", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=300, env=environment, check=False)
    summary = (tmp_path / "out/summary.txt").read_text()
    assert done.returncode == 0, summary + done.stderr[-2000:]
    assert "PASS environment: Python" in summary and "built for CUDA" in summary
    assert "DRY 1b training: would run: torchrun --nproc-per-node=1 smoke_train.py --preset 1b --steps 200" in summary
    assert "PASS injected gradient fault: gloo on cpu, cpu: grad_norm_consistency at step 5" in summary
    assert "PASS sweep: gloo, 2 rank(s), bfloat16" in summary and "wrong elements 0" in summary
    assert "PASS CUDA-less run refused" in summary and "PROVISION-REFUSED" in summary
    assert "0 step(s) failed" in summary
    # nccl-tests: the real Makefile's commands for one architecture where the release tarball is
    # in bench/vendor (git ignores it); else the lines it would run, and the step skipped.
    if (ROOT / "bench/vendor/nccl-tests-2.17.8.tar.gz").exists():
        assert "PASS nccl-tests: dry run: would build: make -C" in summary and "sm_90 only" in summary
    else:
        assert "SKIP nccl-tests: no nccl-tests source at" in summary and "would run: env" in summary

