"""The lab grown to three GPU nodes, as an operator adds one (lab up, then a full apply): the
pair rounds name the node whose network is slow, and the other two are certified without it.

It runs after the other lab modules (which expect two GPU nodes) and gives the lab back its two
nodes at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provisioner.cli import main
from provisioner.lab import cluster

from .conftest import LAB_GPUS, LAB_NODES, node_exec

pytestmark = pytest.mark.lab
LAB = "lab"
NODES = ["gpu01", "gpu02", "gpu03"]


@pytest.fixture(scope="module")
def three_gpu_nodes(provisioned_lab, tmp_path_factory: pytest.TempPathFactory):
    runs = tmp_path_factory.mktemp("three-node-runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROVISION_RUNS_DIR", str(runs))
        cluster.lab_up(3, LAB_GPUS, log=lambda message: None, reset_state=False)
        assert main(["apply", "--inventory", LAB]) == 0
        # Three nodes' six ranks time-slice two CPUs: a node's nccl-tests alone measured up to 58 %
        # below the others' (two nodes: 41 %), so the lab's 45 % would name a node for the CPUs it
        # did not get. For this module, 70 % (the next `lab up` writes the inventory again).
        inventory = cluster.lab_inventory_dir() / "group_vars" / "all.yml"
        settings = yaml.safe_load(inventory.read_text())
        settings["certification_variance_percent"] = 70
        inventory.write_text(yaml.safe_dump(settings, sort_keys=False))
        yield NODES
        node_exec("gpu03", "tc", "qdisc", "del", "dev", "eth0", "root")
        cluster.lab_up(LAB_NODES, LAB_GPUS, log=lambda message: None, reset_state=False)
        # Slurm and the monitoring targets without gpu03 again.
        assert main(["apply", "--inventory", LAB, "--tags", "slurm,monitoring"]) == 0


def test_a_nodes_slow_network_is_named_by_the_pairs_and_the_others_certified(three_gpu_nodes, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(tmp_path / "runs"))
    # gpu03's link to the other nodes at 800 Mbit/s (a token bucket: this kernel has no sch_netem);
    # its ranks' own traffic inside the node is untouched.
    shaped = node_exec("gpu03", "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "800mbit",
                       "burst", "128kb", "latency", "100ms")
    assert shaped.returncode == 0, shaped.stderr
    try:
        assert main(["certify", "--inventory", LAB, "--only", "communication"]) == 1
    finally:
        node_exec("gpu03", "tc", "qdisc", "del", "dev", "eth0", "root")
    record = sorted((tmp_path / "runs").glob("*-certify"))[-1]
    document = json.loads((record / "certification.json").read_text())
    verdicts = document["node_verdicts"]
    assert verdicts["gpu01"]["certified"] and verdicts["gpu02"]["certified"]
    assert "nccl-tests.localised.node.gpu03" in verdicts["gpu03"]["failed_checks"]
    # three rounds of disjoint pairs (an odd count leaves one node out of each): two partners each
    pairs = [job for round_ in document["rounds"] for job in round_["jobs"] if job["scope"] == "pair"]
    assert len(pairs) == 3 and all(len(round_["jobs"]) == 1 for round_ in document["rounds"]
                                   if round_["name"].startswith("nccl-tests pairs"))
    assert {node: sum(node in job["nodes"] for job in pairs) for node in NODES} == dict.fromkeys(NODES, 2)
    medians = document["medians_gbps"]["nccl-tests.pair"]
    assert medians["gpu01+gpu03"] < medians["gpu01+gpu02"] * 0.3 and medians["gpu02+gpu03"] < medians[
        "gpu01+gpu02"] * 0.3
    finding = next(f for f in document["findings"] if f["nodes"] == ["gpu03"])
    assert "bad with every partner" in finding["how"]
    # left out of the all-nodes rounds, which certify the other two
    assert document["excluded"] == {"gpu03": "nccl-tests on all nodes"}
    assert all(job["nodes"] == ["gpu01", "gpu02"] for round_ in document["rounds"] for job in round_["jobs"]
               if job["scope"] == "all")
    assert {c["id"]: c for c in document["checks"]}["nccl-tests.all.all.busbw"]["passed"]


def test_the_dry_run_of_the_three_nodes_touches_nothing(three_gpu_nodes, capsys, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(tmp_path / "runs"))
    capsys.readouterr()
    assert main(["certify", "--inventory", LAB, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # 2 alone, 3 pairings, 2 all, the training, its resume, the checkpoint storage
    assert len(plan["rounds"]) == 10 and plan["estimate_s"] > 0
    for jobs in plan["rounds"]:
        busy = [node for job in jobs for node in job["nodes"]]
        assert len(busy) == len(set(busy))
    assert not (tmp_path / "runs").exists()
