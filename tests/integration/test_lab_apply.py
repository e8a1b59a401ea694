"""The lab end to end: real Ansible over SSH into systemd containers with simulated GPUs."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from provisioner.ansible.records import read_summary
from provisioner.cli import main
from provisioner.lab import cluster
from provisioner.lab.images import NODE_IMAGE
from provisioner.lab.state import update_state
from tests.helpers import last_summary

from .conftest import LAB_GPUS, LAB_NODES, node_exec

pytestmark = pytest.mark.lab
LAB = "lab"


def events_of(tmp_path: Path) -> list[dict]:
    record = sorted((tmp_path / "runs").iterdir())[-1]
    return [json.loads(line) for line in (record / "events.jsonl").read_text().splitlines()]


def test_lab_status_shows_every_node_reachable(lab, capsys):
    assert main(["lab", "status"]) == 0
    out = capsys.readouterr().out
    for node in ("ctl01", "gpu01", "gpu02"):
        assert re.search(rf"{node}\s.*running.*ok", out), out


def test_lab_up_leaves_other_containers_of_the_node_image_alone(lab, capsys):
    # Molecule's scenarios run containers of the lab's node image (which carries the lab's label).
    stranger = "molecule-stranger-of-the-lab"
    subprocess.run(["docker", "rm", "--force", stranger], capture_output=True, check=False)
    subprocess.run(["docker", "run", "--detach", "--name", stranger, "--entrypoint", "sleep", NODE_IMAGE, "600"],
                   capture_output=True, check=True)
    try:
        cluster.lab_up(LAB_NODES, LAB_GPUS, log=lambda message: None)
        assert main(["lab", "status"]) == 0
        assert stranger not in capsys.readouterr().out
        running = subprocess.run(["docker", "inspect", "--format", "{{.State.Running}}", stranger],
                                 capture_output=True, text=True, check=False)
        assert running.stdout.strip() == "true", running.stderr
    finally:
        subprocess.run(["docker", "rm", "--force", stranger], capture_output=True, check=False)


def test_lab_nodes_run_systemd_and_have_fake_gpu_devices(lab):
    assert node_exec("gpu01", "systemctl", "is-system-running").stdout.strip() in ("running", "degraded")
    listing = node_exec("gpu01", "sh", "-c", "ls /dev/nvidia[0-9]*").stdout.split()
    assert len(listing) == LAB_GPUS
    stat = node_exec("gpu01", "stat", "-c", "%F %t", "/dev/nvidia0").stdout.strip()
    assert stat == "character special file c3"  # major 195, as the NVIDIA driver makes them
    assert node_exec("ctl01", "sh", "-c", "ls /dev/nvidia0").returncode != 0


def test_shared_volume_is_seen_by_every_node(lab):
    assert node_exec("gpu01", "sh", "-c", "echo from-gpu01 > /shared/probe").returncode == 0
    assert node_exec("gpu02", "cat", "/shared/probe").stdout.strip() == "from-gpu01"


def test_ssh_is_strict_and_key_based(lab):
    lab_dir = cluster.lab_dir()
    known = (lab_dir / "known_hosts").read_text()
    assert all(f"{lab[node]},{node} ssh-ed25519" in known for node in lab)
    wrong_key = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o",
         f"UserKnownHostsFile={lab_dir / 'known_hosts'}", "-o", "IdentitiesOnly=yes", "-i", "/dev/null",
         f"provision@{lab['gpu01']}", "true"], capture_output=True, text=True, timeout=30)
    assert wrong_key.returncode != 0 and "Permission denied" in wrong_key.stderr


def test_nvidia_smi_list_and_csv_formats(provisioned_lab):
    listing = node_exec("gpu01", "nvidia-smi", "-L").stdout.splitlines()
    assert len(listing) == LAB_GPUS
    assert all(re.fullmatch(r"GPU \d+: NVIDIA H100 80GB HBM3 \(UUID: GPU-[0-9a-f-]+\)", line) for line in listing)
    csv = node_exec("gpu01", "nvidia-smi", "--query-gpu=index,name,memory.total,driver_version",
                    "--format=csv").stdout.splitlines()
    assert csv[0] == "index, name, memory.total [MiB], driver_version"
    assert csv[1] == "0, NVIDIA H100 80GB HBM3, 81559 MiB, 535.161.08"
    bare = node_exec("gpu01", "nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits")
    assert bare.stdout.splitlines()[0] == "81559"
    wrong = node_exec("gpu01", "nvidia-smi", "--query-gpu=bogus", "--format=csv")
    assert wrong.returncode == 2 and 'Field "bogus" is not a valid field to query.' in wrong.stdout


def _outline(text: str) -> set[tuple[int, str]]:
    """(indent, label) of every line of an `nvidia-smi -q` report, values dropped."""
    outline = set()
    for line in text.splitlines():
        if not line.strip() or line.startswith("GPU ") or line.startswith("="):
            continue
        indent = (len(line) - len(line.lstrip(" "))) // 4
        outline.add((indent, line.split(":")[0].strip()))
    return outline


def test_nvidia_smi_q_follows_the_real_layout(provisioned_lab, real_outputs: Path):
    real = (real_outputs / "nvidia-smi" / "nvidia-smi-q_h100x8_535.161.08.txt").read_text()
    ours = node_exec("gpu01", "nvidia-smi", "-q").stdout
    missing = _outline(ours) - _outline(real)
    assert missing == set(), f"lines the real H100 report does not have: {sorted(missing)}"
    assert "Driver Version                            : 535.161.08" in ours
    assert ours.count("\nGPU 00000000:") == LAB_GPUS
    assert len(re.findall(r"^ {4}ECC Errors$", ours, re.M)) == LAB_GPUS


def test_nvidia_smi_reads_the_node_state_on_every_call(healthy_lab):
    def inject(state):
        state["gpus"][3]["ecc_errors"]["volatile"]["dram_uncorrectable"] = 2

    update_state(cluster.node_hw_dir("gpu02"), inject)
    out = node_exec("gpu02", "nvidia-smi", "--query-gpu=index,driver_version,ecc.errors.uncorrected.volatile.total",
                    "--format=csv,noheader").stdout.splitlines()
    assert out[3] == "3, 535.161.08, 2"
    assert node_exec("gpu01", "nvidia-smi", "--query-gpu=ecc.errors.uncorrected.volatile.total",
                     "--format=csv,noheader").stdout.splitlines()[3] == "0"


def test_nvidia_smi_reports_the_installed_package_version(provisioned_lab):
    installed = node_exec("gpu01", "dpkg-query", "-W", "-f=${Version}", "nvidia-smi").stdout
    assert installed == "535.161.08-1"
    held = node_exec("gpu01", "apt-mark", "showhold").stdout.split()
    assert {"nvidia-driver", "nvidia-smi", "nvidia-fabricmanager", "datacenter-gpu-manager"} <= set(held)
    assert node_exec("gpu01", "systemctl", "is-active", "nvidia-fabricmanager", "nvidia-dcgm").returncode == 0


def test_apply_succeeds_and_a_second_apply_changes_nothing(healthy_lab, first_apply: Path, tmp_path: Path):
    first = read_summary(first_apply)  # the session's first apply, on fresh nodes
    assert set(first["hosts"]) == {"ctl01", "gpu01", "gpu02"}
    assert first["phases"]["preflight"]["tasks"] > 10
    assert main(["apply", "--inventory", LAB]) == 0
    second = last_summary(tmp_path / "runs")
    assert second["totals"]["changed"] == 0 and second["totals"]["ok"] == 3
    fact = json.loads(node_exec("gpu01", "cat", "/etc/ansible/facts.d/provision_host.fact").stdout)
    assert fact["gpus"] == {"expected": LAB_GPUS, "model": "H100-SXM5-80GB"}
    assert fact["os"] == "Debian 12" and fact["cluster"] == "lab"
    versions = second["recorded"]["provision_versions"]
    assert set(versions) == {"gpu01", "gpu02"}
    assert versions["gpu02"]["driver"] == "535.161.08"
    assert versions["gpu02"]["hca_firmware"] == {"MT_0000000838": ["28.39.1002"]}


def test_the_checkpoints_filesystem_is_one_filesystem_on_every_gpu_node(provisioned_lab):
    """The storage phase bound the lab's checkpoints directory at /checkpoints on both GPU nodes:
    what one writes the other reads, an unprivileged user may write, and fstab keeps it."""
    for node in ("gpu01", "gpu02"):
        mounted = node_exec(node, "findmnt", "--noheadings", "--output", "TARGET", "/checkpoints")
        assert mounted.stdout.strip() == "/checkpoints", (node, mounted.stderr)
        assert "/shared/checkpoints /checkpoints none bind" in node_exec(node, "cat", "/etc/fstab").stdout
    written = node_exec("gpu01", "runuser", "-u", "nobody", "--", "sh", "-c", "echo shard > /checkpoints/lab-shard")
    assert written.returncode == 0, written.stderr
    try:
        assert node_exec("gpu02", "cat", "/checkpoints/lab-shard").stdout == "shard\n"
    finally:
        node_exec("gpu01", "rm", "-f", "/checkpoints/lab-shard")


def test_become_is_used_over_an_unprivileged_ssh_user(provisioned_lab, tmp_path: Path):
    assert main(["apply", "--inventory", LAB, "--limit", "gpu01", "--tags", "preflight"]) == 0
    owner = node_exec("gpu01", "stat", "-c", "%U", "/etc/ansible/facts.d/provision_host.fact").stdout.strip()
    assert owner == "root"
    assert node_exec("gpu01", "id", "-u", "provision").stdout.strip() != "0"


def test_limited_run_still_gathers_facts_from_every_host(provisioned_lab, tmp_path: Path):
    assert main(["apply", "--inventory", LAB, "--limit", "gpu01", "--tags", "preflight"]) == 0
    summary = last_summary(tmp_path / "runs")
    assert set(summary["hosts"]) == {"gpu01"}
    gathered = {
        event["event_data"]["res"]["item"]
        for event in events_of(tmp_path)
        if event["event"] == "runner_item_on_ok"
        and event["event_data"]["task"] == "Preflight | Gather facts from the hosts outside a limited run"
        and "ansible_facts" in event["event_data"]["res"]
    }
    assert gathered == {"ctl01", "gpu02"}


def test_missing_gpu_fails_that_node_only_and_retry_failed_reruns_it(healthy_lab, tmp_path: Path):
    update_state(cluster.node_hw_dir("gpu02"), lambda state: state["gpus"].pop())
    assert main(["apply", "--inventory", LAB, "--tags", "preflight"]) == 1
    summary = last_summary(tmp_path / "runs")
    assert summary["hosts_failed"] == ["gpu02"]
    assert summary["hosts"]["gpu01"]["status"] == "ok" and summary["hosts"]["ctl01"]["status"] == "ok"
    message = summary["hosts"]["gpu02"]["failures"][0]["message"]
    assert "gpu02: the inventory declares 8 x H100-SXM5-80GB, nvidia-smi lists 7 GPU(s)" in message

    update_state(cluster.node_hw_dir("gpu02"), lambda state: state["gpus"].append(dict(state["gpus"][0], index=7)))
    assert main(["apply", "--inventory", LAB, "--retry-failed", "--tags", "preflight"]) == 0
    retry = last_summary(tmp_path / "runs")
    assert retry["limit"] == "gpu02" and set(retry["hosts"]) == {"gpu02"}


def test_unreachable_node_is_named_and_the_others_complete(provisioned_lab, tmp_path: Path):
    subprocess.run(["docker", "stop", "--time", "1", cluster.container_name("gpu02")], check=True,
                   capture_output=True)
    try:
        assert main(["apply", "--inventory", LAB, "--tags", "preflight"]) == 1
        summary = last_summary(tmp_path / "runs")
        assert summary["hosts_unreachable"] == ["gpu02"]
        assert summary["hosts"]["gpu01"]["status"] == "ok" and summary["hosts"]["ctl01"]["status"] == "ok"
        assert summary["hosts"]["gpu02"]["failures"][0]["message"]
    finally:
        cluster.lab_up(2, LAB_GPUS, log=lambda message: None, reset_state=False)
    assert main(["apply", "--inventory", LAB, "--retry-failed"]) == 0


def test_check_finds_no_drift_after_apply_then_names_a_drifted_node(provisioned_lab, tmp_path: Path, capsys):
    assert main(["check", "--inventory", LAB]) == 0  # every phase, in check mode
    node_exec("gpu01", "sh", "-c", "echo '{}' > /etc/ansible/facts.d/provision_host.fact")
    capsys.readouterr()
    assert main(["check", "--inventory", LAB, "--tags", "preflight"]) == 3
    summary = last_summary(tmp_path / "runs")
    assert {change["host"] for change in summary["changes"]} == {"gpu01"}
    assert "gpu01" in capsys.readouterr().out.split("what would change")[1]
    assert main(["apply", "--inventory", LAB, "--tags", "preflight"]) == 0
    assert main(["check", "--inventory", LAB, "--tags", "preflight"]) == 0


def _hca_firmware(node: str, version: str, image: str | None = None):
    def change(state):
        for hca in state["hcas"]:
            hca["firmware_version"] = version
            if image is not None:
                hca["image_version"] = image

    update_state(cluster.node_hw_dir(node), change)


def test_node_with_other_hca_firmware_fails_naming_it_and_both_versions(healthy_lab, tmp_path: Path, capsys):
    _hca_firmware("gpu02", "28.37.1014")
    assert main(["apply", "--inventory", LAB, "--tags", "firmware"]) == 1
    summary = last_summary(tmp_path / "runs")
    assert summary["hosts_failed"] == ["gpu02"]
    assert summary["hosts"]["gpu01"]["status"] == "ok"
    failure = summary["hosts"]["gpu02"]["failures"][0]
    assert failure["phase"] == "firmware"
    assert "gpu02 differs from the fleet" in failure["message"]
    assert "HCA firmware (MT_0000000838)" in failure["message"]
    assert "28.39.1002" in failure["message"] and "28.37.1014" in failure["message"]


def test_allowed_firmware_update_brings_the_node_in_line(healthy_lab, tmp_path: Path):
    _hca_firmware("gpu02", "28.37.1014")
    host_vars = cluster.lab_inventory_dir() / "host_vars"
    host_vars.mkdir(exist_ok=True)
    (host_vars / "gpu02.yml").write_text("firmware_update_allowed: true\n")
    try:
        assert main(["apply", "--inventory", LAB, "--limit", "gpu02", "--tags", "firmware"]) == 0
    finally:
        (host_vars / "gpu02.yml").unlink()
        host_vars.rmdir()
    query = node_exec("gpu02", "mlxfwmanager", "--query").stdout
    assert "28.37.1014" not in query and "Update required" not in query
    assert last_summary(tmp_path / "runs")["recorded"]["provision_versions"]["gpu02"]["hca_firmware"] == {
        "MT_0000000838": ["28.39.1002"]}


def test_check_reports_firmware_that_moved_since_the_apply(healthy_lab, tmp_path: Path):
    assert main(["apply", "--inventory", LAB, "--tags", "firmware"]) == 0
    _hca_firmware("gpu01", "28.40.1000", image="28.40.1000")  # updated out of band
    assert main(["check", "--inventory", LAB, "--tags", "firmware"]) == 1
    summary = last_summary(tmp_path / "runs")
    assert summary["hosts_failed"] == ["gpu01"]
    assert "28.40.1000" in summary["hosts"]["gpu01"]["failures"][0]["message"]
    moved = [c for c in summary["changes"] if c["task"].startswith("Firmware | Record the versions")]
    assert [c["host"] for c in moved] == ["gpu01"]


def test_dcgm_standin_prints_the_real_diag_format(healthy_lab):
    from provisioner.parsers import parse_dcgmi_diag

    assert "dcgmi  version: 3.3.9" in node_exec("gpu01", "dcgmi", "--version").stdout
    healthy = parse_dcgmi_diag(node_exec("gpu01", "dcgmi", "diag", "-r", "3").stdout)
    assert healthy["passed"] is True and healthy["dcgm_version"] == "3.3.9"
    assert {"Denylist", "PCIe", "GPU Memory", "Memory Bandwidth"} <= {t["name"] for t in healthy["tests"]}
    update_state(cluster.node_hw_dir("gpu02"), lambda state: state.update(dcgm_diag_failures=["GPU Memory"]))
    failing = node_exec("gpu02", "dcgmi", "diag", "-r", "3")
    assert failing.returncode != 0
    assert parse_dcgmi_diag(failing.stdout)["passed"] is False
