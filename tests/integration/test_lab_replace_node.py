"""provision replace-node on the lab: a GPU node's machine swapped for a bare one, rebuilt,
certified against a healthy node and returned to service; failures leave it drained.

(Run after the other lab modules, as tests/conftest.py orders them: it replaces gpu02's container.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.lab import cluster
from provisioner.lab.ssh import host_key_fingerprint
from provisioner.lab.state import update_state
from tests.helpers import last_document

from .conftest import monitoring_api, node_exec, sinfo_node, wait_for

pytestmark = pytest.mark.lab
LAB = "lab"
OTHER_FIRMWARE = "28.38.1002"


def steps_record(runs: Path) -> dict:
    return last_document(runs, "replace-node-steps", "replace-node.json")


def test_bad_requests_are_refused_before_touching_anything(runs: Path, capsys):
    assert main(["replace-node", "gpu09", "--inventory", LAB]) == 2
    assert "gpu09 is not a host of inventory lab" in capsys.readouterr().err
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from provisioner.ansible.lock import "
         "inventory_lock\nwith inventory_lock(Path(sys.argv[1]), 'apply'):\n print('held', flush=True); "
         "time.sleep(60)", str(cluster.lab_inventory_dir())], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["replace-node", "gpu02", "--inventory", LAB]) == 2
        assert "is locked by `provision apply`" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert sinfo_node("gpu02").split("|")[0] == "idle"  # nothing was drained
    assert not runs.exists() or not list(runs.iterdir())


def test_resume_refuses_a_node_not_certified_since_its_last_change(runs: Path, capsys):
    assert main(["drain", "gpu02", "--inventory", LAB, "--reason", "test drain"]) == 0
    assert sinfo_node("gpu02").startswith("drained|test drain")
    assert main(["resume", "gpu02", "--inventory", LAB]) == 1
    assert "has not passed certification since its last change" in capsys.readouterr().err
    assert main(["resume", "gpu02", "--inventory", LAB, "--force"]) == 0
    wait_for(lambda: sinfo_node("gpu02").startswith("idle"), 60, "gpu02 idle")


def test_a_replacement_with_other_hca_firmware_stays_drained_naming_it(runs: Path):
    hw = cluster.node_hw_dir("gpu02")
    original = update_state(hw, lambda s: None)

    def other_firmware(state: dict) -> None:
        for hca in state["hcas"]:
            hca["firmware_version"] = hca["image_version"] = OTHER_FIRMWARE

    update_state(hw, other_firmware)
    try:
        assert main(["replace-node", "gpu02", "--inventory", LAB, "--reason", "swap test",
                     "--accept-new-host-key", host_key_fingerprint("gpu02")]) == 1
        state, reason = sinfo_node("gpu02").split("|", 1)
        assert state.startswith("drain") and "firmware" in reason.lower() and OTHER_FIRMWARE in reason
        document = steps_record(runs)
        assert [s["name"] for s in document["steps"]][:3] == ["drain", "known hosts", "build"]
        assert document["result"] == "failed" and document["failed_step"] == "build"
        assert all(s["duration_s"] >= 0 and s["started"] for s in document["steps"])
    finally:
        update_state(hw, lambda s: s.update(original))
        node_exec("ctl01", "scontrol", "update", "nodename=gpu02", "state=resume")
        wait_for(lambda: sinfo_node("gpu02").startswith("idle"), 60, "gpu02 idle again")


def _targets_up(address: str) -> bool:
    """gpu02's node and DCGM targets are scraped at its new address, and up."""
    targets = monitoring_api(cluster_address("ctl01"), 9090, "/api/v1/targets")["data"]["activeTargets"]
    mine = [t for t in targets if t["labels"].get("instance") == "gpu02"]
    return ({t["labels"]["job"] for t in mine} == {"node", "dcgm"}
            and all(f"//{address}:" in t["scrapeUrl"] and t["health"] == "up" for t in mine))


def cluster_address(node: str) -> str:
    return next(s.address for s in cluster.lab_status() if s.name == node)


def test_a_destroyed_node_is_rebuilt_certified_and_back_in_service(runs: Path):
    old_address = cluster_address("gpu02")
    # A user's job on the other node: it must run to its end while gpu02 is rebuilt.
    submitted = node_exec("ctl01", "sbatch", "--parsable", "--nodelist=gpu01", "--gres=gpu:1", "--output=/tmp/user.out",
                          "--wrap", "sleep 90; echo finished")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    new_address = cluster.replace_gpu_node("gpu02", log=lambda message: None)
    assert new_address != old_address
    # The new machine's host key is trusted only as the operator vouches for it.
    assert main(["replace-node", "gpu02", "--inventory", LAB, "--reason", "GPU 3 fell off the bus"]) == 2
    assert main(["replace-node", "gpu02", "--inventory", LAB, "--accept-new-host-key",
                 "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"]) == 2
    assert not list(runs.glob("*-replace-node-steps")), "a refused replace-node changed something"
    assert main(["replace-node", "gpu02", "--inventory", LAB, "--reason", "GPU 3 fell off the bus",
                 "--accept-new-host-key", host_key_fingerprint("gpu02")]) == 0

    document = steps_record(runs)
    assert [s["name"] for s in document["steps"]] == ["drain", "known hosts", "build", "verify versions", "certify",
                                                      "resume"]
    assert document["result"] == "in service" and all(s["ok"] for s in document["steps"])
    certify_step = document["steps"][4]
    assert certify_step["evidence"]["partner"] == "gpu01"
    certification = json.loads((Path(certify_step["run_record"]) / "certification.json").read_text())
    assert certification["nodes"] == ["gpu02", "gpu01"] and certification["node_verdicts"]["gpu02"]["certified"]
    assert certification["training"]["steps_done"] == 200

    assert sinfo_node("gpu02").split("|")[0] == "idle"
    assert f"NodeAddr={new_address}" in node_exec("ctl01", "cat", "/etc/slurm/nodes.conf").stdout
    # A GPU job lands on it, confined to its one GPU (the rebuilt node's cgroup device rules).
    landed = node_exec("ctl01", "srun", "--nodelist=gpu02", "--gres=gpu:1", "--time=1", "sh", "-c",
                       'echo "$(hostname) visible=$CUDA_VISIBLE_DEVICES"; '
                       "for d in /dev/nvidia0 /dev/nvidia1; do cat $d 2>&1 >/dev/null; done; true")
    lines = landed.stdout.splitlines()
    assert landed.returncode == 0 and lines[0] == "gpu02 visible=0", (landed.stdout, landed.stderr)
    denied = [line for line in lines if "Operation not permitted" in line]
    assert len(denied) == 1 and "/dev/nvidia1" in denied[0], lines
    wait_for(lambda: _targets_up(new_address), 90, "gpu02's Prometheus targets up at its new address")
    # The user's job on gpu01 was never interrupted: it wrote its last line after its whole sleep
    # (its Slurm record may be purged by now: MinJobAge).
    wait_for(lambda: node_exec("gpu01", "cat", "/tmp/user.out").stdout.strip() == "finished", 180,
             f"the user's job {job} to finish")
