"""Slurm on the lab, against the real daemons: GPU GRES, device confinement, multi-node jobs,
the health check, limited runs and partition changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner.cli import main
from provisioner.lab import cluster
from provisioner.lab.state import update_state
from tests.helpers import last_record, last_summary

from .conftest import LAB_GPUS, node_exec, wait_for

pytestmark = pytest.mark.lab
LAB = "lab"


def ctl(*command: str) -> str:
    result = node_exec("ctl01", *command)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_every_node_idle_with_its_gpus(provisioned_lab):
    lines = set(ctl("sinfo", "--noheader", "--Node", "--format", "%N|%P|%T|%G").split())
    assert {"gpu01|gpu*|idle|gpu:h100_sxm5_80gb:8", "gpu02|gpu*|idle|gpu:h100_sxm5_80gb:8",
            "gpu01|debug|idle|gpu:h100_sxm5_80gb:8"} <= lines
    gres = node_exec("gpu01", "cat", "/etc/slurm/gres.conf").stdout
    assert [line for line in gres.splitlines() if line.startswith("Name=")] == [
        f"Name=gpu Type=h100_sxm5_80gb File=/dev/nvidia{index}" for index in range(LAB_GPUS)]
    assert "ConstrainDevices=yes" in node_exec("gpu01", "cat", "/etc/slurm/cgroup.conf").stdout


def test_job_gets_exactly_two_gpus_and_cannot_open_the_others(provisioned_lab):
    out = ctl("srun", "-p", "gpu", "-w", "gpu01", "--gres=gpu:2", "sh", "-c",
              'echo "visible=$CUDA_VISIBLE_DEVICES"; '
              'for d in /dev/nvidia[0-7]; do cat "$d" 2>&1 >/dev/null; done; true')
    assert "visible=0,1" in out.splitlines()
    denied = [line for line in out.splitlines() if "Operation not permitted" in line]
    assert len(denied) == LAB_GPUS - 2, out
    assert not any("/dev/nvidia0" in line or "/dev/nvidia1" in line for line in denied)
    # the allocated ones open as far as the (absent) driver: no permission error
    assert "cat: /dev/nvidia0: No such device or address" in out.splitlines()


def test_two_jobs_get_disjoint_gpus(provisioned_lab):
    jobs = [ctl("sbatch", "--parsable", "-p", "gpu", "-w", "gpu02", "--gres=gpu:4", "-o", f"/tmp/disjoint-{n}.out",
                "--wrap", "scontrol show job -d $SLURM_JOB_ID | grep -o 'GRES=gpu[^ ]*'; sleep 8").strip()
            for n in (1, 2)]
    wait_for(lambda: all(ctl("squeue", "--noheader", "-j", job, "-o", "%T").strip() == "RUNNING" for job in jobs),
             30, "both jobs to run at once")
    wait_for(lambda: not ctl("squeue", "--noheader", "-j", ",".join(jobs)).strip(), 60, "the jobs to end")
    indices = []
    for n in (1, 2):
        line = node_exec("gpu02", "cat", f"/tmp/disjoint-{n}.out").stdout.strip()
        indices.append(line.split("IDX:")[1].rstrip(")"))
    assert sorted(indices) == ["0-3", "4-7"], indices


def test_more_gpus_than_a_node_has_is_rejected(provisioned_lab):
    result = node_exec("ctl01", "srun", "-p", "gpu", f"--gres=gpu:{LAB_GPUS + 1}", "true")
    assert result.returncode != 0
    assert "Requested node configuration is not available" in result.stderr


def test_a_job_runs_across_two_nodes_with_the_nccl_settings(provisioned_lab):
    out = ctl("srun", "-p", "gpu", "-N", "2", "--ntasks-per-node=1", "--gres=gpu:1", "sh", "-c",
              'echo "$(hostname) $NCCL_IB_TIMEOUT $NCCL_IB_HCA"')
    assert sorted(out.splitlines()) == ["gpu01 22 =mlx5_0:1,mlx5_1:1", "gpu02 22 =mlx5_0:1,mlx5_1:1"]


def uncorrectable_ecc(node: str, gpu: int, count: int) -> None:
    """Set one simulated GPU's volatile uncorrectable DRAM ECC count."""
    def change(state):
        state["gpus"][gpu]["ecc_errors"]["volatile"]["dram_uncorrectable"] = count
    update_state(cluster.node_hw_dir(node), change)


def test_uncorrectable_ecc_error_drains_the_node_with_the_reason(healthy_lab):
    def ecc(count: int):
        uncorrectable_ecc("gpu02", 3, count)

    ecc(2)
    try:
        check = node_exec("gpu02", "/usr/local/sbin/provision-node-health")
        assert check.returncode == 1
        reasons = ctl("sinfo", "-R", "--noheader", "--format", "%N|%E").splitlines()
        assert "gpu02|health: GPU 3 has 2 uncorrectable ECC errors" in reasons
        assert ctl("sinfo", "--noheader", "-n", "gpu02", "-o", "%T").split()[0] == "drained"
    finally:
        ecc(0)
    assert node_exec("gpu02", "/usr/local/sbin/provision-node-health").returncode == 0
    wait_for(lambda: ctl("sinfo", "--noheader", "-n", "gpu02", "-o", "%T").split()[0] == "idle", 60,
             "gpu02 to return to service")
    assert "HealthCheckProgram=/usr/local/sbin/provision-node-health" in ctl("cat", "/etc/slurm/slurm.conf")


def test_the_health_check_keeps_the_reason_of_a_node_someone_else_drained(healthy_lab):
    """An operator's (or replace-node's, or upgrade's) drain outlives a failed and then a passed
    check: the check neither replaces the reason nor resumes the node."""
    ctl("scontrol", "update", "nodename=gpu02", "state=drain", "reason=upgrade: test hold")

    def ecc(count: int):
        uncorrectable_ecc("gpu02", 1, count)

    ecc(2)
    try:
        assert node_exec("gpu02", "/usr/local/sbin/provision-node-health").returncode == 1
        assert "gpu02|upgrade: test hold" in ctl("sinfo", "-R", "--noheader", "--format", "%N|%E").splitlines()
        ecc(0)
        assert node_exec("gpu02", "/usr/local/sbin/provision-node-health").returncode == 0
        assert ctl("sinfo", "--noheader", "-n", "gpu02", "-o", "%T|%E").split("\n")[0] == "drained|upgrade: test hold"
    finally:
        ecc(0)
        ctl("scontrol", "update", "nodename=gpu02", "state=resume")
    wait_for(lambda: ctl("sinfo", "--noheader", "-n", "gpu02", "-o", "%T").split()[0] == "idle", 60, "gpu02 idle")


def test_limited_run_keeps_every_node_in_slurm_conf(provisioned_lab, tmp_path: Path):
    assert main(["apply", "--inventory", LAB, "--limit", "gpu01", "--tags", "slurm"]) == 0
    nodes = node_exec("gpu01", "cat", "/etc/slurm/nodes.conf").stdout
    assert [line.split()[0] for line in nodes.splitlines() if line.startswith("NodeName=")] == [
        "NodeName=gpu01", "NodeName=gpu02"]
    assert nodes == ctl("cat", "/etc/slurm/nodes.conf")
    key = node_exec("ctl01", "base64", "-w0", "/etc/munge/munge.key").stdout.strip()
    assert len(key) > 100
    record = last_record(tmp_path / "runs")
    for path in record.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), f"the munge key leaked into {path}"


def _slurmctld_pid() -> str:
    return ctl("systemctl", "show", "--property", "MainPID", "--value", "slurmctld").strip()


def test_adding_a_partition_reconfigures_without_touching_running_jobs(provisioned_lab, tmp_path: Path):
    job = ctl("sbatch", "--parsable", "-p", "gpu", "--gres=gpu:1", "--wrap", "sleep 600").strip()
    wait_for(lambda: ctl("squeue", "--noheader", "-j", job, "-o", "%T").strip() == "RUNNING", 30, "the job to run")
    pid = _slurmctld_pid()
    all_vars = cluster.lab_inventory_dir() / "group_vars" / "all.yml"
    original = all_vars.read_text()
    settings = yaml.safe_load(original)
    settings["slurm_partitions"].append({"name": "long", "nodes": ["gpu02"], "max_time": "7-00:00:00"})
    all_vars.write_text(yaml.safe_dump(settings, sort_keys=False))
    try:
        assert main(["apply", "--inventory", LAB, "--tags", "slurm"]) == 0
        summary = last_summary(tmp_path / "runs")
        assert "long|gpu02|7-00:00:00" in ctl("sinfo", "--noheader", "--format", "%P|%N|%l").split()
        assert ctl("squeue", "--noheader", "-j", job, "-o", "%T").strip() == "RUNNING"
        assert _slurmctld_pid() == pid  # reconfigured, not restarted
        assert summary["totals"]["changed"] >= 1
    finally:
        all_vars.write_text(original)
        ctl("scancel", job)
    assert main(["apply", "--inventory", LAB, "--tags", "slurm"]) == 0
    assert "long" not in ctl("sinfo", "--noheader", "--format", "%P").split()
