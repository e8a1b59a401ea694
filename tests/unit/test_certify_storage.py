"""The certification's storage part: its round, the checks on what each node wrote and read
(fio's real JSON inside the launcher's lines), the shard each rank writes, and the inventory's
storage settings refused when wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provisioner.certify.criteria import Criteria, storage_checks
from provisioner.certify.outputs import STORAGE_MARK, job_outcome
from provisioner.certify.profiles import Thresholds
from provisioner.certify.schedule import Job, JobOutcome, Limits, Scheduler
from provisioner.cli import main
from provisioner.errors import InputError
from provisioner.inventory.loader import load_inventory

FIO = Path(__file__).resolve().parents[1] / "fixtures" / "fio"
SHARD = 32 * 2**20  # the fixtures: two ranks' shards of 32 MiB


def launcher_output(host: str, write_s: float, read_s: float) -> str:
    """What the launcher prints on a node: each phase's wall time and fio's JSON on one line."""
    lines = [f'PROVISION-START {{"host": "{host}", "task": 0}}']
    for phase, seconds in (("write", write_s), ("read", read_s)):
        fio = json.loads((FIO / f"fio-3.33_checkpoint_{phase}_2jobs_32MiB.json").read_text())
        lines.append(STORAGE_MARK + json.dumps({"host": host, "phase": phase, "seconds": seconds,
                                                "bytes_per_rank": SHARD, "ranks": 2, "direct": True, "fio": fio}))
    return "\n".join(lines) + "\n"


def result(node: str, write_s: float, read_s: float, rc: int = 0, stderr: str = "") -> dict:
    return {"instrument": "storage", "scope": "node", "nodes": [node], "rc": rc, "hung": False,
            "stdout": launcher_output(node, write_s, read_s) if rc == 0 else "", "stderr": stderr}


CRITERIA = Criteria(Thresholds(400, 40, "test"), 1 << 20, variance_percent=10, checkpoint_save_max_s=1.0,
                    checkpoint_load_max_s=1.0)
TARGET = {"model": "20M", "total_bytes": 4 * 2 * SHARD, "ranks": 8, "shard_bytes": SHARD}


def by_id(checks) -> dict:
    return {check.id: check for check in checks}


def test_a_node_slow_to_write_is_named_and_the_save_judged_by_the_slowest():
    runs = [result("gpu01", 0.10, 0.05), result("gpu02", 0.11, 0.05), result("gpu03", 0.10, 0.06),
            result("gpu04", 1.60, 0.05)]
    checks, summary = storage_checks(runs, CRITERIA, TARGET, 3600)
    found = by_id(checks)
    slow = found["storage.variance.write.gpu04"]
    assert not slow.passed and slow.blamed == ["gpu04"] and slow.unit == "GB/s"
    # 64 MiB in 1.6 s
    assert slow.measured == pytest.approx(2 * SHARD / 1.6 / 1e9, abs=1e-4)
    assert all(found[f"storage.variance.write.{n}"].passed for n in ("gpu01", "gpu02", "gpu03"))
    assert all(found[f"storage.variance.read.{n}"].passed for n in ("gpu01", "gpu02", "gpu04"))
    # gpu03 reads 20 % slower than the median: past the 10 % allowed
    assert not found["storage.variance.read.gpu03"].passed
    save = found["storage.save"]
    assert not save.passed and save.measured == 1.6 and save.blamed == [] and "gpu04" in save.detail
    assert found["storage.load"].passed
    assert summary["save_s"] == 1.6 and summary["overhead_at_interval"] == pytest.approx(1.6 / 3601.6, rel=1e-3)
    assert summary["nodes"]["gpu01"]["bytes"] == 2 * SHARD and summary["nodes"]["gpu01"]["direct"] is True


def test_a_node_that_could_not_write_fails_by_name():
    runs = [result("gpu01", 0.1, 0.05),
            result("gpu02", 0, 0, rc=1, stderr="storage: no checkpoints filesystem at '/checkpoints' on gpu02\n")]
    checks, summary = storage_checks(runs, CRITERIA, TARGET, 3600)
    failed = by_id(checks)["storage.ran.gpu02"]
    assert not failed.passed and failed.blamed == ["gpu02"] and "no checkpoints filesystem" in failed.detail
    assert list(summary["nodes"]) == ["gpu01"]
    assert storage_checks([], CRITERIA, TARGET, 3600) == ([], {})


def test_a_short_write_is_a_failed_job():
    job = Job("storage", "node", ["gpu01"])
    whole = {"rc": 0, "stdout": launcher_output("gpu01", 0.1, 0.1), "stderr": ""}
    assert job_outcome(job, [whole], 1, 10).status == "ok"
    short = {**whole, "stdout": whole["stdout"].replace(f'"bytes_per_rank": {SHARD}', f'"bytes_per_rank": {SHARD * 2}')}
    outcome = job_outcome(job, [short], 1, 10)
    assert outcome.status == "failed" and "moved 67108864 of 134217728 bytes" in outcome.reason


def test_storage_runs_last_and_a_failed_node_is_named():
    nodes = [f"gpu{n:02d}" for n in range(1, 5)]
    scheduler = Scheduler(nodes, ("training", "storage"), 8, 3, [], Limits(400, 40), ["--bytes-per-rank", "1024"])
    training = scheduler.next_round()
    assert training is not None and training.jobs[0].instrument == "train"
    scheduler.record([JobOutcome(training.jobs[0], "ok")])
    storage = scheduler.next_round()
    assert storage is not None and storage.name == "checkpoint storage on each node"
    assert [job.nodes for job in storage.jobs] == [[node] for node in nodes]
    assert all(job.args == ["--bytes-per-rank", "1024"] for job in storage.jobs)
    scheduler.record([JobOutcome(job, "failed" if job.nodes == ["gpu03"] else "ok", reason="exit status 1")
                      for job in storage.jobs])
    assert scheduler.next_round() is None
    assert list(scheduler.blamed) == ["gpu03"]


def _with(example_inventory: Path, **values) -> Path:
    path = example_inventory / "group_vars" / "all.yml"
    document = yaml.safe_load(path.read_text())
    document.update(values)
    path.write_text(yaml.safe_dump(document))
    return example_inventory


def test_each_rank_writes_its_shard_of_the_fleets_checkpoint(example_inventory: Path, capsys):
    from provisioner.certify.run import CertifyRequest, storage_args, target_checkpoint

    inventory = load_inventory(example_inventory)
    target = target_checkpoint(inventory)
    # the example: 2 nodes of 8 GPUs, a 70B model in mixed precision with Adam
    assert target.ranks == 16 and target.total_bytes == pytest.approx(68.98e9 * 14, rel=1e-3)
    request = CertifyRequest(inventory, example_inventory / "runs", nodes=["gpu01"])
    # one node certified alone still writes its part of the whole fleet's checkpoint
    assert int(storage_args(request)[1]) == pytest.approx(target.total_bytes / 16, abs=1)


def test_storage_settings_are_checked_and_only_storage_needs_a_filesystem(example_inventory: Path, capsys):
    _with(example_inventory, storage_filesystems=[
        {"name": "ckpt", "type": "nfs", "source": "nas01/export", "path": "/checkpoints"},
        {"name": "data", "type": "lustre", "source": "10.0.0.1@o2ib:/scratch", "path": "relative"},
        {"name": "more", "type": "gpfs", "source": "x", "path": "/more"}])
    with pytest.raises(InputError) as raised:
        load_inventory(example_inventory)
    problems = {p.key: p.message for p in raised.value.problems}
    assert "absolute path" in problems["storage_filesystems[1].path"]
    assert "'gpfs' is not allowed" in problems["storage_filesystems[2].type"]
    _with(example_inventory, storage_filesystems=[
        {"name": "ckpt", "type": "nfs", "source": "nas01/export", "path": "/checkpoints"},
        {"name": "ckpt", "type": "bind", "source": "/site/ckpt", "path": "/checkpoints"}],
        certification_checkpoint_model="a lot")
    with pytest.raises(InputError) as raised:
        load_inventory(example_inventory)
    problems = {p.key: p.message for p in raised.value.problems}
    assert "neither a preset" in problems["certification_checkpoint_model"]
    _with(example_inventory, certification_checkpoint_model="70B")
    with pytest.raises(InputError) as raised:
        load_inventory(example_inventory)
    problems = {p.key: p.message for p in raised.value.problems}
    assert "an NFS export is server:/path" in problems["storage_filesystems[0].source"]
    assert "mount point of another filesystem" in problems["storage_filesystems[1].path"]
    assert "declared twice" in problems["storage_filesystems[1].name"]
    # without a checkpoints filesystem: the default parts leave storage out; --only storage is refused
    _with(example_inventory, storage_filesystems=[])
    capsys.readouterr()
    assert main(["certify", "--inventory", str(example_inventory), "--dry-run", "--json"]) == 0
    assert "storage" not in json.loads(capsys.readouterr().out)["parts"]
    assert main(["certify", "--inventory", str(example_inventory), "--dry-run", "--only", "storage"]) == 2
    assert "storage_filesystems: no checkpoints filesystem to certify" in capsys.readouterr().err
