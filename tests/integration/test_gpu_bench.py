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



def test_gpu_figures_reads_nccl_tests_with_the_parser_alone():
    """The GPU machine has no rich, pydantic or ansible-runner: the figures load the parser's
    module by itself, never the package's __init__ modules or the CLI."""
    fixture = next((ROOT / "tests/fixtures/nccl").glob("*all_reduce*.txt"))
    probe = ("import runpy, sys\n"
             "script, sys.argv = sys.argv[1], ['gpu_figures.py', 'nccl-tests', sys.argv[2]]\n"
             "try:\n    runpy.run_path(script, run_name='__main__')\nexcept SystemExit as end:\n    code = end.code\n"
             "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'pydantic', 'ansible_runner', "
             "'yaml') or m in ('provisioner.cli', 'provisioner.parsers.dcgm'))\n"
             "print('LOADED', loaded, 'EXIT', code)\n")
    done = subprocess.run([sys.executable, "-c", probe, str(ROOT / "bench/gpu_figures.py"), str(fixture)],
                          capture_output=True, text=True, cwd=ROOT,
                          timeout=60, check=False)
    assert "LOADED [] EXIT 0" in done.stdout, done.stdout + done.stderr
    assert "sizes" in done.stdout and "wrong 0" in done.stdout
