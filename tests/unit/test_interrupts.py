"""Ctrl-C during replace-node or upgrade: the step is recorded as interrupted, the node stays
drained with that as the reason, and the command exits 130 like any interrupted run.

The playbook runs are stood in for (no hosts): each answers as ansible-runner's wrapper does
for an interrupted run (exit 130) or is cut off between two runs (KeyboardInterrupt)."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import provisioner.operations.replace_node as replace_module
from provisioner.ansible.records import new_record_dir
from provisioner.ansible.runner import EXIT_INTERRUPTED, EXIT_OK, RunOutcome, RunRequest
from provisioner.inventory.loader import Inventory, load_inventory
from provisioner.operations.replace_node import ReplaceRequest, replace_node
from provisioner.operations.upgrade import UpgradeRequest, upgrade
from provisioner.paths import PROJECT_ROOT


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    """The example inventory (gpu01, gpu02), copied so that its lock file lands outside the project."""
    copy = tmp_path / "inventory"
    shutil.copytree(PROJECT_ROOT / "inventory" / "example", copy)
    return load_inventory(str(copy))


class Playbooks:
    """Stands in for run_playbook: answers each playbook with `answer(request)` (an exit code, or
    an exception to raise) and keeps every request."""

    def __init__(self, answer: Callable[[RunRequest], int | BaseException]):
        self.answer = answer
        self.requests: list[RunRequest] = []

    def __call__(self, request: RunRequest, console: Console | None = None) -> RunOutcome:
        self.requests.append(request)
        record = new_record_dir(request.runs_dir, request.command)
        answer = self.answer(request)
        if isinstance(answer, BaseException):
            raise answer
        if request.playbook == "slurm_states.yml":
            Path(request.extravars["_states_output"]).write_text(json.dumps(
                {"sinfo": "gpu01|idle\ngpu02|idle\n", "reasons": "gpu01|none\ngpu02|none\n"}))
        if request.playbook == "fleet_versions.yml":
            Path(request.extravars["_fleet_output"]).write_text(json.dumps(
                {"differences": [], "nodes": ["gpu01", "gpu02"]}))
        return RunOutcome(answer, record, {"hosts": {}})

    def drains(self) -> list[dict[str, Any]]:
        return [r.extravars for r in self.requests if r.playbook == "drain.yml"]


def quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


@pytest.mark.parametrize("interruption", [EXIT_INTERRUPTED, KeyboardInterrupt()], ids=["in a run", "between runs"])
def test_an_interrupted_replace_node_leaves_the_node_drained_and_exits_130(
        inventory: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interruption: int | BaseException):
    def answer(request: RunRequest) -> int | BaseException:
        first_drain = request.playbook == "drain.yml" and request.extravars["_drain_wait_s"] > 0
        return interruption if first_drain else EXIT_OK

    playbooks = Playbooks(answer)
    monkeypatch.setattr(replace_module, "run_playbook", playbooks)
    # The example's machines do not exist: the operator vouched for the new machine's key.
    monkeypatch.setattr(replace_module, "trusted_host_keys", lambda *args: [])
    runs = tmp_path / "runs"
    code = replace_node(ReplaceRequest(inventory=inventory, node="gpu01", runs_dir=runs), quiet())

    assert code == 130
    document = json.loads(next(runs.glob("*-replace-node-steps")).joinpath("replace-node.json").read_text())
    assert document["result"] == "interrupted" and document["failed_step"] == "drain"
    assert [(s["name"], s["ok"], s["detail"]) for s in document["steps"]] == [("drain", False, "interrupted")]
    # drained again without waiting, the interruption as the reason, and its reservation released
    assert playbooks.drains()[-1]["_drain"] == [{"node": "gpu01", "reason": "replace-node: drain: interrupted"}]
    assert playbooks.drains()[-1]["_drain_wait_s"] == 0
    assert document["drain_reason"] == "replace-node: drain: interrupted"
    assert playbooks.requests[-1].playbook == "reservation.yml"


@pytest.mark.parametrize("interruption", [EXIT_INTERRUPTED, KeyboardInterrupt()], ids=["in a run", "between runs"])
def test_an_interrupted_upgrade_stops_with_its_batch_drained_the_rest_untouched_and_exits_130(
        inventory: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interruption: int | BaseException):
    def answer(request: RunRequest) -> int | BaseException:
        return interruption if request.playbook == "upgrade_node.yml" else EXIT_OK

    playbooks = Playbooks(answer)
    monkeypatch.setattr(replace_module, "run_playbook", playbooks)
    runs = tmp_path / "runs"
    code = upgrade(UpgradeRequest(inventory=inventory, runs_dir=runs, reason="driver 550"), quiet())

    assert code == 130
    document = json.loads(next(runs.glob("*-upgrade-steps")).joinpath("upgrade.json").read_text())
    assert document["result"] == "interrupted"
    assert document["failed_batch"] == ["gpu01"] and document["remaining"] == ["gpu02"]
    steps = document["nodes"]["gpu01"]["steps"]
    assert [(s["name"], s["ok"], s["detail"]) for s in steps] == [
        ("drain", True, ""), ("install and reboot", False, "interrupted")]
    assert document["nodes"]["gpu01"]["drain_reason"] == "upgrade: install and reboot: interrupted"
    assert playbooks.drains()[-1]["_drain"] == [{"node": "gpu01", "reason": "upgrade: install and reboot: interrupted"}]
    # gpu02 was never drained, installed or built
    assert all(r.limit != "gpu02" for r in playbooks.requests)
    assert all(d["node"] == "gpu01" for extravars in playbooks.drains() for d in extravars["_drain"])


def test_a_failed_step_still_exits_1(inventory: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    playbooks = Playbooks(lambda request: 1 if request.playbook == "upgrade_node.yml" else EXIT_OK)
    monkeypatch.setattr(replace_module, "run_playbook", playbooks)
    runs = tmp_path / "runs"
    assert upgrade(UpgradeRequest(inventory=inventory, runs_dir=runs), quiet()) == 1
    document = json.loads(next(runs.glob("*-upgrade-steps")).joinpath("upgrade.json").read_text())
    assert document["result"] == "failed"
    assert document["nodes"]["gpu01"]["steps"][-1]["detail"] == "upgrade_node.yml exited 1"


def test_an_interrupt_outside_any_run_exits_130(monkeypatch: pytest.MonkeyPatch, capsys):
    import provisioner.cli as cli

    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_plan", interrupted)
    assert cli.main(["plan", "--model", "7B", "--gpu", "H100", "--nodes", "1"]) == 130
    assert "interrupted" in capsys.readouterr().err
