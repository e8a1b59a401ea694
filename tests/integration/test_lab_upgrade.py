"""provision upgrade on the lab: the driver pin moved while a user's job runs; a node whose
upgrade fails stops the rollout with the others untouched; a second run goes on from it; each
GPU node is drained, upgraded, rebooted (its container restarts), certified and resumed, one
at a time, and Slurm never shows more than one of them out of service.

(Run after the other lab modules, as tests/conftest.py orders them: it reboots the GPU nodes; it leaves the lab at its
first driver again.)"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from provisioner.cli import main
from provisioner.lab import cluster
from provisioner.lab.apt_repo import DRIVERS
from provisioner.lab.state import DEFAULT_DRIVER_VERSION, update_state
from provisioner.parsers import slurm
from tests.helpers import last_document

from .conftest import LAB_GPUS, LAB_NODES, gpu_nodes_in_service, node_exec, reset_hardware, sinfo_node, wait_for

pytestmark = pytest.mark.lab
LAB = "lab"
GPU_NODES = ["gpu01", "gpu02"]
NEW_DRIVER = next(version for version in DRIVERS if version != DEFAULT_DRIVER_VERSION)


def set_driver_pin(version: str) -> None:
    path = cluster.lab_inventory_dir() / "group_vars" / "all.yml"
    document = yaml.safe_load(path.read_text())
    document["gpu_driver_version"] = version
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def boot_mark(node: str) -> str:
    """PID 1's start time: it changes when the node's container restarts (reboots)."""
    return node_exec(node, "cut", "-d", " ", "-f22", "/proc/1/stat").stdout.strip()


def driver(node: str) -> str:
    return node_exec(node, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").stdout.split("\n")[0]


def upgrade_record(runs: Path) -> dict:
    return last_document(runs, "upgrade-steps", "upgrade.json")


class Watcher(threading.Thread):
    """Samples the GPU nodes' Slurm states every two seconds; the most found out of service at once."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.most_out: list[str] = []
        self.samples = 0

    def run(self) -> None:
        while not self.stop.wait(2):
            answer = node_exec("ctl01", "sinfo", "--noheader", "--Node", "--format", "%N|%T")
            if answer.returncode != 0:
                continue
            out = slurm.nodes_out_of_service(slurm.node_states(answer.stdout), GPU_NODES)
            self.samples += 1
            if len(out) > len(self.most_out):
                self.most_out = out


def test_bad_options_are_refused_before_touching_anything(runs: Path, capsys):
    assert main(["upgrade", "--inventory", LAB, "--batch", "0"]) == 2
    assert "--batch" in capsys.readouterr().err
    assert main(["upgrade", "--inventory", LAB, "--nodes", "gpu09"]) == 2
    assert "not GPU nodes of inventory lab: gpu09" in capsys.readouterr().err
    assert main(["upgrade", "--inventory", LAB, "--max-unavailable", "0"]) == 2
    assert all(sinfo_node(node).startswith("idle") for node in GPU_NODES)


def test_an_unreachable_gpu_node_is_named_and_counted_out_so_nothing_is_touched(runs: Path):
    """gpu02 powered off (its container stopped): the fleet read names it unreachable instead of
    failing, and with --max-unavailable 1 it takes the only room, so gpu01 is left in service."""
    before = boot_mark("gpu01")
    subprocess.run(["docker", "stop", "--time", "1", cluster.container_name("gpu02")], check=True,
                   capture_output=True)
    try:
        assert main(["upgrade", "--inventory", LAB, "--reason", "unreachable node"]) == 1
        document = upgrade_record(runs)
        assert document["result"] == "stopped" and document["unreachable"] == ["gpu02"]
        assert "(gpu02 unreachable): --max-unavailable 1" in document["detail"], document["detail"]
        assert document["skipped"]["gpu02"].startswith("unreachable over SSH")
        assert document["batches"] == [] and document["nodes"] == {}
        assert sinfo_node("gpu01").startswith("idle") and boot_mark("gpu01") == before
    finally:
        cluster.lab_up(LAB_NODES, LAB_GPUS, log=lambda message: None, reset_state=False)
    # powered on again: its services come back with an apply of that node alone
    assert main(["apply", "--inventory", LAB, "--limit", "gpu02"]) == 0
    gpu_nodes_in_service()


def port_down(state: dict) -> None:
    state["hcas"][0]["ports"][0].update(state="Down", physical_state="Polling")


@pytest.fixture
def back_to_the_first_driver(runs: Path):
    """After the test: the lab back at its first driver, as the next `lab up` writes it (the
    packages moved back by an apply, then the nodes rebooted, then an apply on the new boot)."""
    yield
    set_driver_pin(DEFAULT_DRIVER_VERSION)
    reset_hardware()
    main(["apply", "--inventory", LAB, "--limit", ",".join(GPU_NODES), "--tags", "gpu_driver"])  # fails: reboot
    for node in GPU_NODES:
        node_exec(node, "systemctl", "start", "--job-mode=replace-irreversibly", "--no-block", "reboot.target")
    wait_for(lambda: all(driver(node) == DEFAULT_DRIVER_VERSION for node in GPU_NODES), 120, "the nodes rebooted")
    assert main(["apply", "--inventory", LAB, "--limit", ",".join(GPU_NODES)]) == 0
    for node in GPU_NODES:
        wait_for(lambda node=node: sinfo_node(node).startswith("idle"), 60, f"{node} idle")


def test_a_new_driver_rolls_one_node_at_a_time_a_failed_node_stops_it_and_a_rerun_goes_on(
        runs: Path, back_to_the_first_driver):
    before = {node: boot_mark(node) for node in GPU_NODES}
    submitted = node_exec("ctl01", "sbatch", "--parsable", "--nodelist=gpu01", "--gres=gpu:1",
                          "--output=/shared/upgrade-user.out", "--wrap", "sleep 20; echo finished")
    assert submitted.returncode == 0, submitted.stderr
    set_driver_pin(NEW_DRIVER)
    # gpu01's fabric port goes down: its upgrade fails after its reboot, at the build.
    update_state(cluster.node_hw_dir("gpu01"), port_down)
    watcher = Watcher()
    watcher.start()
    try:
        assert main(["upgrade", "--inventory", LAB, "--reason", f"driver {NEW_DRIVER}"]) == 1
        failed = upgrade_record(runs)
        assert failed["result"] == "failed" and failed["failed_batch"] == ["gpu01"]
        assert failed["remaining"] == ["gpu02"]
        assert [s["name"] for s in failed["nodes"]["gpu01"]["steps"]] == ["drain", "install and reboot", "build"]
        assert any("version mismatch" in reason for reason in failed["nodes"]["gpu01"]["rebooted_for"])
        state, reason = sinfo_node("gpu01").split("|", 1)
        assert state.startswith("drain") and reason.startswith("upgrade: build:"), reason
        # The user's job ran to its end before gpu01 was taken: the drain waited for it.
        assert node_exec("gpu01", "cat", "/shared/upgrade-user.out").stdout.strip() == "finished"
        assert failed["nodes"]["gpu01"]["steps"][0]["duration_s"] > 5, failed["nodes"]["gpu01"]["steps"][0]
        # gpu02 was not touched: in service, on its driver, not rebooted
        assert sinfo_node("gpu02").startswith("idle") and driver("gpu02") == DEFAULT_DRIVER_VERSION
        assert boot_mark("gpu02") == before["gpu02"] and "gpu02" not in failed["nodes"]

        reset_hardware()  # the port is up again
        code = main(["upgrade", "--inventory", LAB, "--reason", f"driver {NEW_DRIVER}"])
    finally:
        watcher.stop.set()
        watcher.join()
    document = upgrade_record(runs)
    assert code == 0, json.dumps(document, indent=1)[-3000:]
    assert document["result"] == "upgraded" and document["planned"] == ["gpu01", "gpu02"]
    assert document["batches"] == [["gpu01"], ["gpu02"]]
    for node in GPU_NODES:
        steps = document["nodes"][node]["steps"]
        assert [s["name"] for s in steps] == ["drain", "install and reboot", "build", "verify versions", "certify",
                                              "resume"]
        assert all(s["ok"] for s in steps)
        assert boot_mark(node) != before[node], f"{node} was not rebooted"
        assert driver(node) == NEW_DRIVER
        assert sinfo_node(node).startswith("idle")
    # gpu02 rebooted in this run (gpu01 already had, in the failed one)
    assert document["nodes"]["gpu02"]["changes"] == [
        f"{name} {DEFAULT_DRIVER_VERSION}-1 -> {NEW_DRIVER}-1" for name in ("nvidia-driver", "nvidia-fabricmanager",
                                                                          "nvidia-smi")]
    assert any("version mismatch" in reason for reason in document["nodes"]["gpu02"]["rebooted_for"])
    assert document["nodes"]["gpu01"]["rebooted_for"] == []
    # gpu02 (not yet upgraded) was gpu01's partner, exempt from the version check; gpu01 was gpu02's
    assert document["nodes"]["gpu01"]["steps"][4]["evidence"]["partner"] == "gpu02"
    assert document["nodes"]["gpu01"]["steps"][4]["evidence"]["partner_not_yet_upgraded"] is True
    assert document["nodes"]["gpu02"]["steps"][4]["evidence"]["partner"] == "gpu01"
    assert watcher.samples > 20 and len(watcher.most_out) <= 1, watcher.most_out
