"""A GPU node that does not answer over SSH during an upgrade: named, left alone, never a
partner, and counted against --max-unavailable, instead of failing the fleet read before
anything starts. The playbook runs and the certification are stood in for (no hosts)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

import provisioner.operations.replace_node as replace_module
from provisioner.ansible import playbooks
from provisioner.ansible.records import new_record_dir
from provisioner.ansible.runner import EXIT_FAILED, EXIT_OK, RunOutcome, RunRequest
from provisioner.inventory.loader import Inventory, load_inventory
from provisioner.operations.lifecycle import StepFailed, StepRecord, handed_playbook
from provisioner.operations.upgrade import UpgradeRequest, upgrade
from provisioner.paths import PROJECT_ROOT
from tests.helpers import StandInCluster

ANSWERING = ["gpu01", "gpu02"]
DEAD = "gpu03"


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    """The example inventory with a third GPU node, gpu03 (copied: its lock file lands outside the project)."""
    copy = tmp_path / "inventory"
    shutil.copytree(PROJECT_ROOT / "inventory" / "example", copy)
    hosts = yaml.safe_load((copy / "hosts.yml").read_text())
    hosts["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"][DEAD] = {"ansible_host": "10.10.1.13"}
    (copy / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return load_inventory(str(copy))


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> StandInCluster:
    """gpu03 is dead: Slurm still lists it idle (it has not noticed yet); SSH to it fails."""
    return StandInCluster(nodes=("gpu01", "gpu02", DEAD), unreachable=(DEAD,)).install(monkeypatch)


def quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


def record_of(runs: Path) -> dict[str, Any]:
    return json.loads(next(runs.glob("*-upgrade-steps")).joinpath("upgrade.json").read_text())


def test_an_unreachable_node_counts_against_max_unavailable_and_stops_the_upgrade_before_it_starts(
        inventory: Inventory, cluster: StandInCluster, tmp_path: Path):
    runs = tmp_path / "runs"
    assert upgrade(UpgradeRequest(inventory=inventory, runs_dir=runs, reason="driver 550"), quiet()) == EXIT_FAILED
    document = record_of(runs)
    assert document["result"] == "stopped" and document["unreachable"] == [DEAD]
    assert "gpu03 unreachable" in document["detail"] and "--max-unavailable 1" in document["detail"]
    assert document["skipped"][DEAD].startswith("unreachable over SSH")
    assert document["remaining"] == ANSWERING
    # nothing was drained, installed or built
    assert {r.playbook for r in cluster.requests} == {"slurm_states.yml", "fleet_versions.yml"}


def test_with_room_the_others_are_upgraded_and_the_unreachable_node_is_never_a_partner(
        inventory: Inventory, cluster: StandInCluster, tmp_path: Path):
    runs = tmp_path / "runs"
    request = UpgradeRequest(inventory=inventory, runs_dir=runs, reason="driver 550", max_unavailable=2)
    assert upgrade(request, quiet()) == EXIT_OK
    document = record_of(runs)
    assert document["result"] == "upgraded" and document["batches"] == [["gpu01"], ["gpu02"]]
    assert document["unreachable"] == [DEAD] and DEAD in document["skipped"] and DEAD not in document["nodes"]
    assert cluster.certified_pairs == [["gpu01", "gpu02"], ["gpu02", "gpu01"]]
    assert cluster.touched(DEAD) == []
    for node in ANSWERING:
        verify = next(s for s in document["nodes"][node]["steps"] if s["name"] == "verify versions")
        assert verify["ok"] and verify["evidence"]["nodes_compared"] == ANSWERING


class _Answer:
    def __init__(self, summary: dict[str, Any], writes: bool):
        self.summary, self.writes = summary, writes

    def __call__(self, request: RunRequest, console: Console | None = None) -> RunOutcome:
        if self.writes:
            Path(request.extravars["_fleet_output"]).write_text(json.dumps({"differences": [], "nodes": ["gpu01"]}))
        return RunOutcome(EXIT_FAILED, new_record_dir(request.runs_dir, request.command), self.summary)


@pytest.mark.parametrize("summary, writes, tolerate, message", [
    # a host that failed is a failure even where unreachable ones are tolerated
    ({"hosts": {"gpu01": {"failures": ["dpkg-query: broken"]}}, "hosts_failed": ["gpu01"],
      "hosts_unreachable": ["gpu02"]}, True, True, "gpu01: dpkg-query: broken"),
    # no host answered: nothing handed back
    ({"hosts": {}, "hosts_failed": [], "hosts_unreachable": ["gpu01", "gpu02"]}, False, True, "handed nothing back"),
    # reads that do not tolerate unreachable hosts fail on them as before
    ({"hosts": {}, "hosts_failed": [], "hosts_unreachable": ["gpu02"]}, True, False, "exited 1"),
], ids=["failed and unreachable", "all unreachable", "not tolerated"])
def test_what_a_tolerant_read_still_refuses(inventory: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            summary: dict[str, Any], writes: bool, tolerate: bool, message: str):
    monkeypatch.setattr(playbooks, "run_playbook", _Answer(summary, writes))
    request = UpgradeRequest(inventory=inventory, runs_dir=tmp_path / "runs")
    with pytest.raises(StepFailed, match=message):
        handed_playbook(request, quiet(), "upgrade-versions", "fleet_versions.yml", "_fleet_output", {},
                        tolerate_unreachable=tolerate)


def test_a_tolerant_read_with_only_unreachable_hosts_hands_back_what_the_others_answered(
        inventory: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    summary = {"hosts": {}, "hosts_failed": [], "hosts_unreachable": ["gpu02"]}
    monkeypatch.setattr(playbooks, "run_playbook", _Answer(summary, writes=True))
    request = UpgradeRequest(inventory=inventory, runs_dir=tmp_path / "runs")
    handed, _ = handed_playbook(request, quiet(), "upgrade-versions", "fleet_versions.yml", "_fleet_output", {},
                                tolerate_unreachable=True)
    assert handed["nodes"] == ["gpu01"]


@pytest.mark.parametrize("node, passes", [("gpu01", True), ("gpu02", False)], ids=["other unreachable", "itself"])
def test_replace_node_compares_with_the_nodes_that_answer(inventory: Inventory, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, node: str, passes: bool):
    """gpu02 does not answer: replacing gpu01 compares it with the others and names gpu02; a
    replaced node that does not answer itself fails its check."""
    summary = {"hosts": {}, "hosts_failed": [], "hosts_unreachable": ["gpu02"]}
    monkeypatch.setattr(playbooks, "run_playbook", _Answer(summary, writes=True))
    request = replace_module.ReplaceRequest(inventory=inventory, node=node, runs_dir=tmp_path / "runs")
    step = StepRecord("verify versions", "")
    if passes:
        replace_module._verify_versions(request, quiet(), step)
        assert step.evidence["unreachable"] == ["gpu02", "gpu03"] and step.evidence["nodes_compared"] == ["gpu01"]
    else:
        with pytest.raises(StepFailed, match="its versions could not be read"):
            replace_module._verify_versions(request, quiet(), step)


@pytest.mark.parametrize("busy, partner", [(set(), "gpu02"), ({"gpu02"}, None)], ids=["gpu02 idle", "gpu02 busy"])
def test_replace_node_never_pairs_with_a_node_that_did_not_answer(
        inventory: Inventory, cluster: StandInCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        busy: set[str], partner: str | None):
    """gpu03 is dead but Slurm still lists it idle: with gpu02 busy, replace-node waits for a
    partner (here not at all) rather than certifying with gpu03."""
    key = replace_module.known_hosts.HostKey("ssh-ed25519 AAAAC3", "SHA256:stand-in", "ED25519")
    monkeypatch.setattr(replace_module.known_hosts, "scan", lambda *args: [key])
    monkeypatch.setattr(replace_module.known_hosts, "record", lambda *args: None)
    cluster.busy = busy
    runs = tmp_path / "runs"
    request = replace_module.ReplaceRequest(inventory=inventory, node="gpu01", runs_dir=runs, partner_wait_s=0,
                                            accept_host_key=key.fingerprint)
    code = replace_module.replace_node(request, quiet())
    document = json.loads(next(runs.glob("*-replace-node-steps")).joinpath("replace-node.json").read_text())
    verify = next(s for s in document["steps"] if s["name"] == "verify versions")
    assert verify["ok"] and verify["evidence"]["unreachable"] == [DEAD]
    if partner:
        assert code == EXIT_OK and cluster.certified_pairs == [["gpu01", partner]]
    else:
        assert code == EXIT_FAILED and cluster.certified_pairs == []
        assert document["steps"][-1]["name"] == "certify"
        assert document["steps"][-1]["detail"].startswith("no idle healthy node to pair gpu01 with within 0 s")


def test_a_rollout_reads_the_fleet_and_slurm_once_per_batch_beyond_what_its_steps_need(
        inventory: Inventory, cluster: StandInCluster, tmp_path: Path):
    """The versions read after a batch's build choose its partners, and the states read after its
    last resume plan the next batch: neither is read again (at 1,000 nodes a fleet read asks
    every GPU node)."""
    request = UpgradeRequest(inventory=inventory, runs_dir=tmp_path / "runs", reason="driver 550", max_unavailable=2)
    assert upgrade(request, quiet()) == EXIT_OK
    reads = [r.playbook for r in cluster.requests if r.playbook in ("fleet_versions.yml", "slurm_states.yml")]
    # before the batches: states, versions; per batch: versions (verify), states (partner), states (resume)
    batch = ["fleet_versions.yml", "slurm_states.yml", "slurm_states.yml"]
    assert reads == ["slurm_states.yml", "fleet_versions.yml", *batch, *batch]
