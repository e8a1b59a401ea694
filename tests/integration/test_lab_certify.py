"""provision certify on the lab: Slurm jobs, gloo across the lab nodes, verdicts and reports."""

from __future__ import annotations

import json
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from provisioner.cli import main
from tests.browser import chromium, open_page, visible_rows
from tests.helpers import last_document, last_record

from .conftest import node_exec, sinfo_node, throttle_storage, wait_for

pytestmark = pytest.mark.lab
LAB = "lab"
OTHER_DRIVER, LAB_DRIVER = "550.54.15-1", "535.161.08-1"
DRIVER_PACKAGES = ("nvidia-driver", "nvidia-smi", "nvidia-fabricmanager")


def certification(tmp_path: Path) -> dict:
    return last_document(tmp_path / "runs", "certify", "certification.json")


def resume(node: str) -> None:
    node_exec("ctl01", "scontrol", "update", f"nodename={node}", "state=resume")
    wait_for(lambda: sinfo_node(node).startswith("idle"), 60, f"{node} idle again")


@pytest.fixture
def certify_runs(healthy_lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Idle GPU nodes before and after the test (a test drains nodes on purpose)."""
    for node in ("gpu01", "gpu02"):
        if not sinfo_node(node).startswith("idle"):
            resume(node)
    yield tmp_path
    for node in ("gpu01", "gpu02"):
        if not sinfo_node(node).startswith("idle"):
            resume(node)


def test_the_lab_is_certified_with_evidence(certify_runs: Path):
    assert main(["certify", "--inventory", LAB]) == 0
    document = certification(certify_runs)
    assert document["certified"] and document["nodes"] == ["gpu01", "gpu02"]
    assert all(v["certified"] for v in document["node_verdicts"].values())
    ids = {check["id"] for check in document["checks"]}
    for node in ("gpu01", "gpu02"):
        assert {f"nccl-tests.node.{node}.busbw", f"sweep.node.{node}.busbw", f"nccl-tests.node.{node}.data",
                f"nccl-tests.variance.node.{node}"} <= ids
    assert {"nccl-tests.all.all.busbw", "nccl-tests.all.all.transport", "sweep.all.all.busbw",
            "training.loss_decrease", "training.grad_norm_consistency", "training.step_time_cv",
            "training.parameter_checksum"} <= ids
    training = document["training"]
    assert training["steps_done"] == 1000 and training["ranks"] == 4 and training["backend"] == "gloo"
    assert training["mean_loss"][-1] < training["mean_loss"][0] / 2
    # in rounds: both nodes alone at once (nccl-tests, then the sweep), all nodes, the training,
    # the training resumed from the checkpoint it saved, the checkpoint written and read by both
    # nodes at once
    names = [r["name"] for r in document["rounds"] if r["kind"] == "base"]
    assert names == ["nccl-tests on each node", "sweep on each node", "nccl-tests on all nodes", "sweep on all nodes",
                     "smoke training", "smoke training resumed from its checkpoint", "checkpoint storage on each node"]
    # Two nodes' four ranks share two CPUs: a node that lost them for one measurement is measured
    # again, and certified on its second figure; nothing else is an extra round.
    again = [r for r in document["rounds"] if r["kind"] != "base"]
    assert all(r["name"].endswith(": the slow ones measured again") for r in again)
    assert document["schedule"]["base_rounds"] == 7 and not document["findings"]
    # nccl-tests repeated three times per measurement, the medians kept per scope
    measured_again = sum(job["instrument"] == "nccl-tests" for r in again for job in r["jobs"])
    assert sum(job["instrument"] == "nccl-tests" for job in document["jobs"]) == 9 + 3 * measured_again
    assert set(document["medians_gbps"]["nccl-tests.node"]) == {"gpu01", "gpu02"}
    # resumed after step 980 on the other node's ranks (rotated), the last 20 steps bit for bit
    resume = document["resume"]
    assert resume["saved_at"] == 980 and resume["steps"] == 20 and resume["tolerance"] == 0
    assert resume["reference_hosts"] == ["gpu01", "gpu01", "gpu02", "gpu02"]
    assert resume["resumed_hosts"] == ["gpu02", "gpu02", "gpu01", "gpu01"]
    assert resume["resumed_mean_loss"] == resume["reference_mean_loss"]
    assert {"training.resume.state", "training.resume.mean_loss", "training.resume.grad_norm",
            "training.resume.parameters"} <= ids
    # the lab's 20M-parameter checkpoint (280 MB) in four shards, each node its two ranks' part
    storage = document["storage"]
    assert storage["checkpoint"]["ranks"] == 4 and storage["checkpoint"]["total_bytes"] == 280e6
    for node in ("gpu01", "gpu02"):
        assert storage["nodes"][node]["bytes"] >= 140e6 and storage["nodes"][node]["write_gbps"] > 0
        assert {f"storage.variance.write.{node}", f"storage.variance.read.{node}"} <= ids
    assert {"storage.save", "storage.load"} <= ids and storage["save_s"] <= storage["save_max_s"]
    alone = [job for job in document["jobs"] if job["scope"] == "node" and job["name"].endswith("#1")
             and job["instrument"] in ("nccl-tests", "sweep")]
    first_two = [number for number, r in enumerate(document["rounds"]) if r["name"] in names[:2]]
    assert {job["round"] for job in alone if job["round"] in first_two} == set(first_two)
    assert sum(job["round"] in first_two for job in alone) == 4
    # every task got its share of the node's CPUs (2 CPUs: one per nccl-tests task, both for torchrun)
    assert {f"cpus.{node}" for node in ("gpu01", "gpu02")} <= ids and document["node_cpus"] == {"gpu01": 2,
                                                                                                 "gpu02": 2}
    assert all(rank["cpus"] == 2 for rank in training["rank_compute"])
    assert {"training.straggler", "training.step_time_cv"} <= ids
    record = last_record(certify_runs / "runs", "certify")
    suites = ET.parse(record / "certification.junit.xml").getroot()
    assert {s.get("name") for s in suites} == {"gpu01", "gpu02", "fleet"}
    assert all(s.get("failures") == "0" for s in suites) and sum(int(s.get("tests")) for s in suites) >= 20
    page = (record / "certification.html").read_text()
    assert "lab: CERTIFIED" in page and "None: every node passed every check." in page
    for section in ("Nodes by check", "Communication", "Smoke training", "Checkpoint storage", "Rounds", "Checks"):
        assert f"<h2>{section}</h2>" in page
    # the strips of each node's busbw, per-rank compute, checkpoint write and read; the loss, the
    # gradient norm, the step times, the resume, busbw by size, the rounds
    assert page.count("<svg") == 11
    # in a real browser: no script error, the two nodes shown (a fleet this small is not folded)
    with chromium() as driver:
        assert open_page(driver, record / "certification.html") == []
        assert {"gpu01", "gpu02"} <= set(visible_rows(driver))
    # nccl-tests ran against the node's pinned libnccl2 (the lab's stand-in NCCL), launched with --mpi=pmix.
    assert document["nccl_versions"]["system"] == {"gpu01": "2.18.5+cuda12.2", "gpu02": "2.18.5+cuda12.2"}
    results = json.loads((record / "certification-outputs" / "results.json").read_text())
    argvs = [run["argv"] for round_ in results["rounds"] for job in round_["jobs"] for run in job["runs"]
             if job["job"]["instrument"] == "nccl-tests"]
    assert argvs and all("--mpi=pmix" in argv and "--cpus-per-task=1" in argv for argv in argvs)
    assert {"nccl-tests.node.gpu01.busbw_bucket", "training.grad_norm_finite"} <= ids


def _shape(node: str, interface: str) -> None:
    """Slow the node's interface to 2 Gbit/s: netem where the kernel has it, else a token bucket
    (this machine's kernel has no sch_netem)."""
    shaped = node_exec(node, "tc", "qdisc", "replace", "dev", interface, "root", "netem", "rate", "2gbit")
    if shaped.returncode != 0:
        shaped = node_exec(node, "tc", "qdisc", "replace", "dev", interface, "root", "tbf", "rate", "2gbit",
                           "burst", "256kb", "latency", "100ms")
    assert shaped.returncode == 0, shaped.stderr


def test_a_slow_node_fails_the_variance_check_by_name_and_is_drained(certify_runs: Path):
    # A lab node's ranks talk over its loopback interface (its "NVLink"): slow it on gpu02.
    _shape("gpu02", "lo")
    try:
        assert main(["certify", "--inventory", LAB, "--only", "communication", "--drain-failed"]) == 1
    finally:
        node_exec("gpu02", "tc", "qdisc", "del", "dev", "lo", "root")
    document = certification(certify_runs)
    verdicts = document["node_verdicts"]
    assert verdicts["gpu01"]["certified"] and not verdicts["gpu02"]["certified"]
    assert "nccl-tests.variance.node.gpu02" in verdicts["gpu02"]["failed_checks"]
    medians = document["medians_gbps"]["nccl-tests.node"]
    assert medians["gpu02"] < medians["gpu01"] / 2
    state = sinfo_node("gpu02")
    assert state.startswith("drain") and "certify: nccl-tests.variance.node.gpu02" in state
    assert sinfo_node("gpu01").startswith("idle")
    resume("gpu02")


def test_a_node_slow_to_write_its_checkpoint_is_named(certify_runs: Path):
    """gpu02's block I/O throttled to 25 MB/s: its part of the checkpoint (140 MB) takes seconds
    where gpu01's takes a fraction of one; the variance check names it, the save is judged."""
    throttle_storage("gpu02", 25_000_000)
    try:
        assert main(["certify", "--inventory", LAB, "--only", "storage"]) == 1
    finally:
        throttle_storage("gpu02", 0)
    document = certification(certify_runs)
    assert [r["name"] for r in document["rounds"]] == ["checkpoint storage on each node"]
    verdicts = document["node_verdicts"]
    assert verdicts["gpu01"]["certified"], verdicts
    assert "storage.variance.write.gpu02" in verdicts["gpu02"]["failed_checks"]
    nodes = document["storage"]["nodes"]
    assert nodes["gpu02"]["write_gbps"] < 0.03 < nodes["gpu01"]["write_gbps"]
    assert document["storage"]["save_s"] == nodes["gpu02"]["write_s"] > 5


def test_a_rank_that_resumes_from_a_perturbed_shard_is_named_with_its_host(certify_runs: Path):
    """Resumed with each node on the other's ranks, rank 1 (on gpu02) perturbs a tensor it
    loaded: the resume check names gpu02's rank and the tensor; the losses part at once."""
    assert main(["certify", "--inventory", LAB, "--only", "training", "--steps", "200",
                 "--inject-resume-fault", "1"]) == 1
    document = certification(certify_runs)
    checks = {check["id"]: check for check in document["checks"]}
    state = checks["training.resume.state"]
    assert not state["passed"] and state["blamed"] == ["gpu02"]
    assert state["detail"] == "rank 1 on gpu02: model.blocks.1.mlp.0.weight differs"
    assert not checks["training.resume.mean_loss"]["passed"] and checks["training.resume.mean_loss"]["measured"] == 181
    assert checks["training.loss_decrease"]["passed"]  # the training itself went well
    assert not document["node_verdicts"]["gpu02"]["certified"] and document["node_verdicts"]["gpu01"]["certified"]


def test_a_rank_with_perturbed_gradients_is_named_with_its_host_and_step(certify_runs: Path):
    # Ranks 0-1 run on gpu01, 2-3 on gpu02 (two per node, node order).
    assert main(["certify", "--inventory", LAB, "--only", "training", "--steps", "200",
                 "--inject-grad-fault", "3"]) == 1
    document = certification(certify_runs)
    check = next(c for c in document["checks"] if c["id"] == "training.grad_norm_consistency")
    assert not check["passed"] and check["blamed"] == ["gpu02"]
    assert "step 20: ranks [3] on gpu02" in check["detail"]
    assert document["training"]["steps_done"] == 21  # stopped at the first violation
    assert document["node_verdicts"]["gpu01"]["certified"] and not document["certified"]
    # gpu01 trained again without the named node
    assert [t["nodes"] for t in document["trainings"]] == [["gpu01", "gpu02"], ["gpu01"]]


def test_a_gpu_node_whose_ranks_see_no_gpu_fails_naming_it(certify_runs: Path):
    # As on a GPU node whose job got no GPU: the launcher asks for CUDA, torch sees none.
    conf = "/etc/provision/certify.conf"
    node_exec("gpu02", "sed", "-i", "s/^CERTIFY_REQUIRE_CUDA=0$/CERTIFY_REQUIRE_CUDA=1/", conf)
    try:
        assert main(["certify", "--inventory", LAB, "--only", "training", "--steps", "20"]) == 1
    finally:
        node_exec("gpu02", "sed", "-i", "s/^CERTIFY_REQUIRE_CUDA=1$/CERTIFY_REQUIRE_CUDA=0/", conf)
    document = certification(certify_runs)
    ran = next(c for c in document["checks"] if c["id"] == "training.ran")
    assert not ran["passed"] and ran["blamed"] == ["gpu02"]
    assert "refused to run on the CPU, on gpu02" in ran["detail"] and "CUDA required" in ran["detail"]
    assert document["node_verdicts"]["gpu01"]["certified"] and not document["node_verdicts"]["gpu02"]["certified"]


def _stop_training_ranks(node: str, stopped: dict) -> None:
    """Once the node's ranks have reported a training step (their heartbeat in the job's output on
    the controller), stop them (SIGSTOP: the process stays, silent, as a rank stuck in a driver
    call or a hung GPU). Stopped earlier, while the process group forms, nothing names the ranks."""
    in_steps = f"grep -lsE 'PROVISION-HEARTBEAT .*\"h\": \"{node}\".*\"w\": \"step' " \
        "/var/tmp/provision-certify/*/jobs/*.out"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if node_exec("ctl01", "sh", "-c", in_steps).returncode == 0:
            node_exec(node, "pkill", "-STOP", "-f", "smoke_train.py")
            stopped["at"] = time.monotonic()
            return
        time.sleep(0.5)


def test_a_hung_rank_is_named_within_minutes_and_only_its_node_is_blamed(certify_runs: Path):
    stopped: dict = {}
    stopper = threading.Thread(target=_stop_training_ranks, args=("gpu02", stopped), daemon=True)
    stopper.start()
    try:
        code = main(["certify", "--inventory", LAB, "--only", "training", "--steps", "400"])
        ended = time.monotonic()
    finally:
        stopper.join(timeout=5)
        node_exec("gpu02", "pkill", "-CONT", "-f", "smoke_train.py")
    assert code == 1 and "at" in stopped
    assert ended - stopped["at"] < 300  # the hang timeout (40 s on the lab), not the job's time limit
    document = certification(certify_runs)
    checks = {check["id"]: check for check in document["checks"]}
    assert checks["training.hang"]["blamed"] == ["gpu02"] and checks["training.ran"]["blamed"] == ["gpu02"]
    assert "gpu02: ranks 2,3 fell silent" in checks["training.hang"]["detail"]
    assert not document["node_verdicts"]["gpu02"]["certified"] and document["node_verdicts"]["gpu01"]["certified"]
    # the others trained again without it, and passed
    assert [t["nodes"] for t in document["trainings"]] == [["gpu01"]]
    assert [r["name"] for r in document["rounds"]] == ["smoke training", "smoke training without the named nodes",
                                                       "smoke training resumed from its checkpoint"]
    assert all(check["passed"] for check in document["checks"] if check["id"].startswith("training.1."))


def _driver(version: str) -> None:
    packages = [f"{name}={version}" for name in DRIVER_PACKAGES]
    installed = node_exec("gpu02", "apt-get", "install", "-y", "-q", "--allow-downgrades",
                          "--allow-change-held-packages", *packages)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # The new module is what the node runs after its reboot.
    node_exec("gpu02", "sh", "-c", f"echo {version.rsplit('-', 1)[0]} > /run/nvidia-driver/loaded-version")


def test_a_node_with_another_driver_is_refused_before_any_job(certify_runs: Path, capsys):
    _driver(OTHER_DRIVER)
    try:
        capsys.readouterr()
        assert main(["certify", "--inventory", LAB]) == 1
        out = capsys.readouterr().out
    finally:
        _driver(LAB_DRIVER)
    assert "certification refused" in out and "gpu02" in out and "550.54.15" in out
    record = last_record(certify_runs / "runs", "certify")
    assert not (record / "certification.json").exists()
    assert not any("srun" in line for line in (record / "events.jsonl").read_text().splitlines()
                   if '"runner_on_ok"' in line)


def test_a_drained_node_is_refused(certify_runs: Path, capsys):
    node_exec("ctl01", "scontrol", "update", "nodename=gpu01", "state=drain", "reason=maintenance")
    try:
        capsys.readouterr()
        assert main(["certify", "--inventory", LAB, "--only", "communication"]) == 1
        out = capsys.readouterr().out
    finally:
        resume("gpu01")
    assert "certification refused" in out and "gpu01: drained" in out


def test_bad_nodes_are_bad_input(certify_runs: Path, capsys):
    assert main(["certify", "--inventory", LAB, "--nodes", "gpu01,gpu09"]) == 2
    assert "--nodes" in capsys.readouterr().err
    assert not (certify_runs / "runs").exists() or not list((certify_runs / "runs").iterdir())
