"""The fabric and NCCL phases on the lab: real Ansible over SSH, simulated HCAs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.facts.nccl_profiles import nccl_assignments
from provisioner.lab import cluster
from provisioner.lab.state import update_state
from tests.helpers import last_summary

from .conftest import node_exec

pytestmark = pytest.mark.lab
LAB = "lab"


def _ports(node: str, change) -> None:
    update_state(cluster.node_hw_dir(node), lambda state: change(state["hcas"]))


def test_rdma_stack_installed_and_ports_verified(provisioned_lab):
    packages = node_exec("gpu01", "dpkg-query", "-W", "-f", "${Package} ${Status}\n", "rdma-core",
                         "infiniband-diags", "perftest", "ibverbs-utils").stdout.splitlines()
    assert len(packages) == 4 and all(line.endswith("install ok installed") for line in packages)
    assert "mlx5_ib" in node_exec("gpu01", "cat", "/etc/modules-load.d/provision-rdma.conf").stdout.split()
    limits = node_exec("gpu01", "cat", "/etc/security/limits.d/90-provision-memlock.conf").stdout
    assert "*    hard    memlock    unlimited" in limits


def test_port_down_and_slow_port_fail_that_node_naming_hca_and_port(healthy_lab, tmp_path: Path):
    def break_ports(hcas):
        hcas[1]["ports"][0].update(state="Down", physical_state="Disabled", rate=10)
        hcas[0]["ports"][0].update(rate=200)  # trained at HDR speed: a bad cable or transceiver

    _ports("gpu02", break_ports)
    assert main(["apply", "--inventory", LAB, "--tags", "infiniband"]) == 1
    summary = last_summary(tmp_path / "runs")
    assert summary["hosts_failed"] == ["gpu02"]
    assert summary["hosts"]["gpu01"]["status"] == "ok"
    failure = summary["hosts"]["gpu02"]["failures"][0]
    assert failure["phase"] == "infiniband"
    message = failure["message"]
    assert "InfiniBand: gpu02 has 2 fabric port problem(s)" in message
    rows = {line.split()[0]: line for line in message.splitlines() if line.startswith("mlx5_")}
    assert rows["mlx5_1"].split()[:6] == ["mlx5_1", "1", "Down", "Disabled", "10", "InfiniBand"]
    assert rows["mlx5_1"].endswith("state Down, expected Active; physical state Disabled, expected LinkUp")
    assert rows["mlx5_0"].split()[:5] == ["mlx5_0", "1", "Active", "LinkUp", "200"]
    assert rows["mlx5_0"].endswith("rate 200 Gb/s, expected 400")


def test_missing_hca_is_counted(healthy_lab, tmp_path: Path):
    _ports("gpu01", lambda hcas: hcas.pop())
    assert main(["apply", "--inventory", LAB, "--tags", "infiniband"]) == 1
    summary = last_summary(tmp_path / "runs")
    assert summary["hosts_failed"] == ["gpu01"]
    assert "1 InfiniBand HCAs found (mlx5_0), the inventory expects 2" in \
        summary["hosts"]["gpu01"]["failures"][0]["message"]


def _login_job_environment(node: str, address: str) -> dict[str, str]:
    """What a job started in a login session on `node` (as the unprivileged user, over SSH) sees."""
    lab_dir = cluster.lab_dir()
    result = subprocess.run(
        ["ssh", "-i", str(lab_dir / "ssh" / "id_ed25519"), "-o", f"UserKnownHostsFile={lab_dir / 'known_hosts'}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"provision@{address}",
         "bash -lc 'python3 -c \"import os; print(chr(10).join(k + chr(61) + v for k, v in os.environ.items()))\"'"],
        capture_output=True, text=True, timeout=60, check=True)
    return nccl_assignments(result.stdout.splitlines())


def test_a_job_on_a_lab_node_gets_the_nccl_settings(healthy_lab):
    conf = nccl_assignments(node_exec("gpu02", "cat", "/etc/nccl.conf").stdout.splitlines())
    assert conf["NCCL_IB_TIMEOUT"] == "22" and conf["NCCL_IB_RETRY_CNT"] == "7"
    assert conf["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert conf["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert _login_job_environment("gpu02", healthy_lab["gpu02"]) == conf
    prolog = node_exec("gpu02", "env", "-i", "/etc/nccl/slurm-task-prolog.sh")
    assert nccl_assignments(prolog.stdout.splitlines()) == conf
    own = node_exec("gpu02", "env", "-i", "NCCL_DEBUG=INFO", "/etc/nccl/slurm-task-prolog.sh").stdout
    assert "NCCL_DEBUG" not in own  # a job's own setting wins


def test_nccl_hcas_follow_the_active_ports_and_a_bad_override_changes_nothing(healthy_lab, tmp_path: Path, capsys):
    _ports("gpu01", lambda hcas: hcas[1]["ports"][0].update(state="Down", physical_state="Polling"))
    assert main(["apply", "--inventory", LAB, "--tags", "nccl", "--limit", "gpu01"]) == 0
    conf = nccl_assignments(node_exec("gpu01", "cat", "/etc/nccl.conf").stdout.splitlines())
    assert conf["NCCL_IB_HCA"] == "=mlx5_0:1"

    all_vars = cluster.lab_inventory_dir() / "group_vars" / "all.yml"
    original = all_vars.read_text()
    before = node_exec("gpu01", "cat", "/etc/nccl.conf").stdout
    all_vars.write_text(original.replace("NCCL_IB_TIMEOUT: 22", "NCCL_IB_TIMOUT: 22"))
    capsys.readouterr()
    try:
        assert main(["apply", "--inventory", LAB]) == 2
    finally:
        all_vars.write_text(original)
    assert "nccl_env.NCCL_IB_TIMOUT: unknown NCCL variable" in capsys.readouterr().err
    assert node_exec("gpu01", "cat", "/etc/nccl.conf").stdout == before

    _ports("gpu01", lambda hcas: hcas[1]["ports"][0].update(state="Active", physical_state="LinkUp"))
    assert main(["apply", "--inventory", LAB, "--tags", "nccl", "--limit", "gpu01"]) == 0
    conf = nccl_assignments(node_exec("gpu01", "cat", "/etc/nccl.conf").stdout.splitlines())
    assert conf["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
