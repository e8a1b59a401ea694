"""The linters the project is held to: ruff for Python, ansible-lint (profile production) for Ansible."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

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


def _tasks(node: object):
    """Every mapping in a playbook or task file (tasks, blocks, plays)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _tasks(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tasks(item)


def test_work_on_the_controller_machine_never_asks_for_sudo():
    # The inventory sets ansible_become for the cluster's hosts; a task run on the machine
    # provision runs from must not inherit it (Mitogen runs sudo even as root, and an
    # operator's account has no business escalating there). The `become: false` keyword
    # alone loses to an inventory's ansible_become: the task's (or play's) vars must say it.
    offenders = []
    for path in sorted([*ROOT.glob("playbooks/*.yml"), *ROOT.glob("roles/*/tasks/*.yml")]):
        for task in _tasks(yaml.safe_load(path.read_text())):
            local = task.get("delegate_to") == "localhost" or task.get("hosts") == "localhost"
            if local and (task.get("vars") or {}).get("ansible_become") is not False:
                offenders.append(f"{path.relative_to(ROOT)}: {task.get('name')}")
    assert not offenders, offenders
