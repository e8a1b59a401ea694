"""Ctrl-C during replace-node or upgrade: the step is recorded as interrupted, the node stays
drained with that as the reason, and the command exits 130 like any interrupted run.

The playbook runs are stood in for (no hosts): each answers as ansible-runner's wrapper does
for an interrupted run (exit 130) or is cut off between two runs (KeyboardInterrupt)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import provisioner.operations.replace_node as replace_module
from provisioner.ansible.runner import EXIT_INTERRUPTED, EXIT_OK, RunRequest
from provisioner.inventory.loader import Inventory, load_inventory
from provisioner.operations.replace_node import ReplaceRequest, replace_node
from provisioner.operations.upgrade import UpgradeRequest, upgrade
from provisioner.paths import PROJECT_ROOT
from tests.helpers import StandInCluster


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    """The example inventory (gpu01, gpu02), copied so that its lock file lands outside the project."""
    copy = tmp_path / "inventory"
    shutil.copytree(PROJECT_ROOT / "inventory" / "example", copy)
    return load_inventory(str(copy))


def quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


@pytest.mark.parametrize("interruption", [EXIT_INTERRUPTED, KeyboardInterrupt()], ids=["in a run", "between runs"])
def test_an_interrupted_replace_node_leaves_the_node_drained_and_exits_130(
        inventory: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interruption: int | BaseException):
    def answer(request: RunRequest) -> int | BaseException:
        first_drain = request.playbook == "drain.yml" and request.extravars["_drain_wait_s"] > 0
        return interruption if first_drain else EXIT_OK

    playbooks = StandInCluster(answer=answer).install(monkeypatch)
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

    playbooks = StandInCluster(answer=answer).install(monkeypatch)
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
    StandInCluster(answer=lambda request: 1 if request.playbook == "upgrade_node.yml" else EXIT_OK).install(monkeypatch)
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


@pytest.mark.parametrize("handed_back", [True, False], ids=["differences handed back", "another failure"])
def test_a_build_that_failed_on_the_fleets_differences_names_them(
        inventory: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handed_back: bool):
    """The firmware role hands a node's differences back as data (set_stats); replace-node
    reports them as the build's failure, without reading the fleet again or matching text."""
    cluster = StandInCluster(answer=lambda request: 2 if request.playbook == "replace_node.yml" else EXIT_OK)
    row = {"host": "gpu01", "component": "hca_firmware mlx5_0", "found": "28.39.1002", "expected": "28.40.1000"}
    if handed_back:
        cluster.recorded["replace_node.yml"] = {"provision_fleet_differences": {"gpu01": [row], "gpu02": []}}
    cluster.install(monkeypatch)
    key = replace_module.known_hosts.HostKey("ssh-ed25519 AAAAC3", "SHA256:stand-in", "ED25519")
    monkeypatch.setattr(replace_module.known_hosts, "scan", lambda *args: [key])
    monkeypatch.setattr(replace_module.known_hosts, "record", lambda *args: None)
    runs = tmp_path / "runs"
    assert replace_node(ReplaceRequest(inventory=inventory, node="gpu01", runs_dir=runs,
                                       accept_host_key=key.fingerprint), quiet()) == 1
    document = json.loads(next(runs.glob("*-replace-node-steps")).joinpath("replace-node.json").read_text())
    build = document["steps"][-1]
    assert document["failed_step"] == "build" == build["name"]
    if handed_back:
        assert build["detail"] == "differs from the fleet: hca_firmware mlx5_0 28.39.1002 (expected 28.40.1000)"
        assert build["evidence"]["differences"] == [row]
        assert "28.39.1002" in cluster.drains()[-1]["_drain"][0]["reason"]
    else:
        assert build["detail"] == "replace_node.yml exited 2"
    assert "fleet_versions.yml" not in [r.playbook for r in cluster.requests]
