"""The linters the project is held to: ruff for Python, ansible-lint (profile production) for Ansible."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "NO_COLOR": "1"}
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=environment, timeout=900,
                          check=False)


def test_ruff():
    result = _run(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint_production_profile():
    result = _run(str(BIN / "ansible-lint"), "--profile", "production", "--nocolor")
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
