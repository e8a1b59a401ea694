"""The linters the project is held to: ruff for Python, ansible-lint (profile production) for Ansible."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from provisioner.ansible.redact import SECRET_NAME

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


JINJA_KEYS = ("when", "that", "loop", "failed_when", "changed_when", "until", "with_items", "with_dict")
SECRET_HOLDERS = {"monitoring_alert_receivers"}
# Names about a secret that hold none: where it lives, its checksum, the filters that check it
# without echoing it, and whether one is given.
ABOUT_A_SECRET = re.compile(r"_(file|path|checksum|report|source|problem|given|ready)$")


def _expressions(value: object, raw: bool = False):
    """The Jinja expressions in a task's values: `{{ ... }}` in strings, and whole values of
    the keywords Ansible reads as expressions (when, loop, that, ...)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _expressions(item, raw or key in JINJA_KEYS)
    elif isinstance(value, list):
        for item in value:
            yield from _expressions(item, raw)
    elif isinstance(value, str):
        if raw:
            yield value
        for pair in re.findall(r"\{\{(.*?)\}\}|\{%(.*?)%\}", value, re.DOTALL):
            yield from pair


def _leaf_tasks(tasks: object, no_log: bool = False):
    """(task, whether no_log is on for it) for every task, blocks' no_log inherited."""
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        hidden = no_log or task.get("no_log") is True
        if any(key in task for key in ("block", "rescue", "always")):
            for key in ("block", "rescue", "always"):
                yield from _leaf_tasks(task.get(key), hidden)
        else:
            yield task, hidden


def test_every_task_that_sees_a_secret_is_no_log():
    """A task whose expressions read a secret-named variable (password, token, munge key, webhook
    URL...) or the alert receivers (their URLs and passwords) logs nothing: Ansible would put the
    decrypted value in its result, and so in the run record."""
    offenders = []
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")) + sorted(ROOT.glob("roles/*/handlers/*.yml")):
        for task, hidden in _leaf_tasks(yaml.safe_load(path.read_text())):
            body = {key: value for key, value in task.items() if key not in ("name", "tags", "no_log")}
            names = {token for expression in _expressions(body) for token in re.findall(r"[A-Za-z_]\w*", expression)}
            secret = sorted(name for name in names if name in SECRET_HOLDERS or
                            (SECRET_NAME.search(name) and not ABOUT_A_SECRET.search(name)))
            if secret and not hidden:
                offenders.append(f"{path.relative_to(ROOT)}: {task.get('name')} reads {', '.join(secret)}")
    assert not offenders, "\n".join(offenders)


def test_every_role_readme_is_in_step_with_its_argument_specs():
    """Each role's README.md is generated from its meta/argument_specs.yml (scripts/role_readmes.py)."""
    checked = subprocess.run([sys.executable, "scripts/role_readmes.py", "--check"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert sorted(p.parent.name for p in ROOT.glob("roles/*/README.md")) == sorted(
        p.parent.parent.name for p in ROOT.glob("roles/*/meta/argument_specs.yml"))
