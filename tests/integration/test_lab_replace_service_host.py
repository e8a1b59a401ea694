"""provision replace-node on the lab's controller (which is also its monitoring host): the
machine destroyed while a user's job runs on gpu01, a bare one put in its place, rebuilt.
Nothing is lost: the munge key (recovered from the surviving nodes), Slurm's state (on the
shared filesystem), the job (it runs to its end), its accounting record (the database
restored from its dump), no node drained; Prometheus keeps its targets, rules and history.

(Run after the other lab modules, as tests/conftest.py orders them: it replaces ctl01's container.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.lab import cluster
from provisioner.lab.ssh import host_key_fingerprint
from tests.helpers import last_document

from .conftest import monitoring_api, node_exec, wait_for

pytestmark = pytest.mark.lab
LAB = "lab"
KEY = "/etc/munge/munge.key"
STATE = "/shared/slurm/state"


def controller_address() -> str:
    return next(s.address for s in cluster.lab_status() if s.name == cluster.CONTROLLER)


def prometheus(path: str, **params: str) -> dict:
    return monitoring_api(controller_address(), 9090, path, **params)["data"]


def key_checksums() -> dict[str, str]:
    return {node: node_exec(node, "sha256sum", KEY).stdout.split(" ")[0] for node in ("ctl01", "gpu01", "gpu02")}


def rule_names() -> set[str]:
    return {rule["name"] for group in prometheus("/api/v1/rules")["groups"] for rule in group["rules"]}


def targets() -> list[dict]:
    return prometheus("/api/v1/targets")["activeTargets"]


def sacct_state(job: str) -> str:
    answer = node_exec("ctl01", "sacct", "--noheader", "--parsable2", "--allocations", "--jobs", job,
                       "--format=State")
    return answer.stdout.strip()


def test_the_controller_is_rebuilt_with_its_key_state_jobs_accounting_and_monitoring(runs: Path):
    keys = key_checksums()
    assert len(set(keys.values())) == 1 and all(keys.values()), keys
    rules = rule_names()
    assert rules, "the monitoring host has no alert rules before the rebuild"
    jobs_before = {t["labels"]["job"] for t in targets()}
    before_rebuild = time.time()
    sampled = prometheus("/api/v1/query", query='up{job="node"}', time=f"{before_rebuild:.3f}")["result"]
    assert sampled, "no samples before the rebuild"

    # A user's job on gpu01, running while its controller is destroyed; it ends while the new
    # machine is being built, and reports its end once the new controller is up.
    submitted = node_exec("ctl01", "sbatch", "--parsable", "--nodelist=gpu01", "--gres=gpu:1",
                          "--output=/tmp/rebuild-user.out", "--wrap", "sleep 90; echo finished")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    wait_for(lambda: sacct_state(job) == "RUNNING", 60, f"job {job} running and recorded")
    running_at = time.time()
    # slurmctld writes its state a few seconds after a change: a controller lost in between
    # loses the newest changes (Slurm's own window): a job saved while still pending is
    # launched again by the new controller, and refused by the node that runs it. The job is
    # in the saved state as running once the file was written after it was seen running (a
    # change to the job makes slurmctld save its state; one not followed by any may wait minutes).
    assert node_exec("ctl01", "scontrol", "update", f"jobid={job}", "comment=running").returncode == 0
    wait_for(lambda: float(node_exec("ctl01", "stat", "--format=%.9Y", f"{STATE}/job_state").stdout or 0)
             > running_at, 60, "slurmctld to save its state with the job running")
    # The backup timer's dump (every 15 minutes in production), taken now rather than waited for.
    dumped = node_exec("ctl01", "systemctl", "start", "provision-slurm-accounting-backup.service")
    assert dumped.returncode == 0, dumped.stderr

    old_address = controller_address()
    new_address = cluster.replace_machine("ctl01", log=lambda message: None)
    assert new_address != old_address
    assert node_exec("ctl01", "test", "-e", KEY).returncode != 0  # a bare machine
    assert main(["replace-node", "ctl01", "--inventory", LAB, "--reason", "controller board failed",
                 "--accept-new-host-key", host_key_fingerprint("ctl01")]) == 0

    document = last_document(runs, "replace-node-steps", "replace-node.json")
    assert document["roles"] == ["controller", "monitoring"]
    assert [s["name"] for s in document["steps"]] == ["known hosts", "build", "check the cluster"]
    assert document["result"] == "in service" and all(s["ok"] for s in document["steps"])
    secrets = [node_exec("gpu01", "base64", "-w0", KEY).stdout.strip(),
               (cluster.lab_dir() / "secrets" / "accounting-db-password").read_text().strip()]
    assert all(secrets)
    leaked = [str(path) for path in runs.rglob("*") if path.is_file()
              for secret in secrets if secret in path.read_text(errors="replace")]
    assert not leaked, f"a secret leaked into {leaked}"

    # The cluster's key everywhere, as before: no node was cut off.
    assert key_checksums() == keys
    # The job ran to its end on gpu01, and the accounting history has it (from before the rebuild).
    wait_for(lambda: node_exec("gpu01", "cat", "/tmp/rebuild-user.out").stdout.strip() == "finished", 240,
             f"job {job} to finish")
    wait_for(lambda: sacct_state(job) == "COMPLETED", 60, f"job {job} completed in sacct")
    states = node_exec("ctl01", "sinfo", "--noheader", "--Node", "--format=%N|%T").stdout.split()
    assert sorted(set(states)) == ["gpu01|idle", "gpu02|idle"], states  # a line per partition
    # The nodes reach the controller by name (the lab's DNS follows the new machine).
    assert "SlurmctldHost=ctl01\n" in node_exec("gpu01", "cat", "/etc/slurm/slurm.conf").stdout

    # Monitoring: the same rules, every target up (the controller's own at its new address), and
    # the samples taken before the rebuild still there.
    assert rule_names() == rules
    wait_for(lambda: all(t["health"] == "up" for t in targets()) and {t["labels"]["job"] for t in targets()}
             == jobs_before, 90, "every target up after the rebuild")
    assert any(f"//{new_address}:" in t["scrapeUrl"] for t in targets())
    history = prometheus("/api/v1/query", query='up{job="node"}', time=f"{before_rebuild:.3f}")["result"]
    assert {s["metric"]["instance"] for s in history} == {s["metric"]["instance"] for s in sampled}
