"""The ansible-runner wrapper, driven through real Ansible runs on this machine (local connection)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from provisioner.ansible.lock import inventory_lock
from provisioner.ansible.records import read_summary
from provisioner.ansible.runner import RunRequest, run_playbook
from provisioner.cli import main
from provisioner.inventory.loader import load_inventory

PROBE = Path(__file__).resolve().parent.parent / "playbooks" / "probe.yml"
SETTINGS = PROBE.with_name("settings.yml")
FILTER_IMPORTS = PROBE.with_name("filter_imports.yml")
SECRET = "hunter2-Very-Secret-Token"
# The site playbook on this machine itself: only the preflight phase, never the driver phases.
PREFLIGHT = ["--tags", "preflight"]


def write_local_inventory(directory: Path, host_vars: dict[str, dict] | None = None) -> Path:
    """An inventory whose hosts are all this machine (connection local), each with its own folders."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "group_vars").mkdir(exist_ok=True)
    hosts = {}
    for name in ("ctl01", "gpu01", "gpu02"):
        hosts[name] = {"preflight_facts_dir": str(directory / "nodes" / name / "facts.d"),
                       **(host_vars or {}).get(name, {})}
    document = {"all": {"children": {
        "controller": {"hosts": {"ctl01": hosts["ctl01"]}},
        "monitoring": {"hosts": {"ctl01": None}},
        "gpu_nodes": {"hosts": {"gpu01": hosts["gpu01"], "gpu02": hosts["gpu02"]}},
    }}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    (directory / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "cluster_name": "local",
        "alertmanager_webhook_password": SECRET,
        "probe_dir": str(directory / "probe"),
        "gpu_driver_version": "535.161.08",
        # The certification toolkit's pins, which preflight checks; its torch is not checked
        # against the driver (no GPUs here).
        "certification_require_cuda": False,
        "certification_cuda_packages": {"cuda-nvcc-12-2": "12.2.140-1", "cuda-cudart-dev-12-2": "12.2.140-1",
                                        "libnccl2": "2.18.5-1+cuda12.2", "libnccl-dev": "2.18.5-1+cuda12.2"},
        # No Slurm here: job accounting (which needs its database password) is off.
        "slurm_accounting": False,
        # The monitoring endpoints' password (required), and no Grafana (whose would be too).
        "monitoring_web_password": "local-monitoring-web-password",
        "monitoring_grafana_install": False,
    }))
    (directory / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump({"gpu_count": 2, "gpu_model": "H100"}))
    (directory / "probe").mkdir(exist_ok=True)
    return directory


def run_probe(inventory_dir: Path, runs: Path, **options) -> tuple[int, Path, dict]:
    request = RunRequest(command="apply", playbook=str(PROBE), inventory=load_inventory(str(inventory_dir)),
                         runs_dir=runs, **options)
    outcome = run_playbook(request)
    return outcome.exit_code, outcome.record, outcome.summary


def test_failed_host_does_not_stop_the_others(tmp_path: Path):
    inventory = write_local_inventory(tmp_path / "inv", {"gpu02": {"probe_fail": True}})
    code, record, summary = run_probe(inventory, tmp_path / "runs")
    assert code == 1
    assert summary["hosts_failed"] == ["gpu02"]
    assert summary["hosts"]["gpu01"]["status"] == "ok"
    assert summary["hosts"]["gpu02"]["failures"][0]["message"] == "gpu02 was told to fail"
    assert summary["hosts"]["gpu02"]["failures"][0]["task"] == "Fail on the hosts told to"
    assert (inventory / "probe" / "gpu01.txt").exists() and (inventory / "probe" / "ctl01.txt").exists()
    assert not (inventory / "probe" / "gpu02.txt").exists()
    assert read_summary(record)["exit_code"] == 1


def test_run_record_has_events_artifacts_summary_and_no_secret(tmp_path: Path):
    inventory = write_local_inventory(tmp_path / "inv")
    code, record, summary = run_probe(inventory, tmp_path / "runs")
    assert code == 0
    assert record.parent == tmp_path / "runs" and record.name.endswith("-apply")
    events = [json.loads(line) for line in (record / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "playbook_on_stats" for e in events)
    assert (record / "artifacts" / "ansible" / "stdout").is_file()
    assert summary["totals"] == {"hosts": 3, "ok": 3, "changed": 3, "failed": 0, "unreachable": 0}
    assert summary["phases"]["Probe"]["tasks"] == 4
    leaked = [p for p in record.rglob("*") if p.is_file() and SECRET in p.read_text(errors="ignore")]
    assert leaked == []
    assert "token is ********" in (record / "events.jsonl").read_text()


def test_runs_check_host_keys_and_keep_facts_in_memory(tmp_path: Path, monkeypatch):
    """ansible-runner would turn host key checking off and cache facts in files; provision's
    runs keep ansible.cfg's settings (an operator's own ANSIBLE_HOST_KEY_CHECKING still wins)."""
    inventory = load_inventory(str(write_local_inventory(tmp_path / "inv")))

    def settings() -> dict:
        outcome = run_playbook(RunRequest(command="apply", playbook=str(SETTINGS), inventory=inventory,
                                          runs_dir=tmp_path / "runs"))
        assert outcome.exit_code == 0
        events = [json.loads(line) for line in (outcome.record / "events.jsonl").read_text().splitlines()]
        return next(e["event_data"]["res"]["msg"] for e in events if e["event"] == "runner_on_ok")

    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    assert settings() == {"host_key_checking": True, "fact_cache": "memory"}
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    assert settings()["host_key_checking"] is False


def test_filter_plugins_are_imported_once_by_the_controller(tmp_path: Path, monkeypatch):
    """Forked task workers inherit the filter plugins the controller loaded at the playbook's
    start, instead of importing them again for every task on every host."""
    witness = tmp_path / "imports"
    monkeypatch.setenv("IMPORT_WITNESS_FILE", str(witness))
    inventory = load_inventory(str(write_local_inventory(tmp_path / "inv")))
    outcome = run_playbook(RunRequest(command="apply", playbook=str(FILTER_IMPORTS), inventory=inventory,
                                      runs_dir=tmp_path / "runs"))
    assert outcome.exit_code == 0
    events = [json.loads(line) for line in (outcome.record / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "runner_on_ok" for e in events) == 6
    playbook_pid = next(e["pid"] for e in events if e["event"] == "playbook_on_start")
    assert witness.read_text().split() == [str(playbook_pid)]


def test_second_run_reports_no_change(tmp_path: Path):
    inventory = write_local_inventory(tmp_path / "inv")
    run_probe(inventory, tmp_path / "runs")
    code, _record, summary = run_probe(inventory, tmp_path / "runs")
    assert code == 0 and summary["totals"]["changed"] == 0


def test_lock_refuses_a_second_apply_and_names_the_holder(tmp_path: Path, capsys):
    inventory = write_local_inventory(tmp_path / "inv")
    with inventory_lock(inventory, "certify"):
        code = main(["apply", "--inventory", str(inventory), *PREFLIGHT])
    assert code == 2
    err = capsys.readouterr().err
    assert "locked by `provision certify`" in err and f"pid {os.getpid()}" in err
    assert not (tmp_path / "runs").exists()


def test_cli_apply_runs_site_and_retry_failed_reruns_only_failed_hosts(tmp_path: Path):
    inventory = write_local_inventory(tmp_path / "inv", {"gpu02": {"preflight_min_memory_mb": 10**9}})
    assert main(["apply", "--inventory", str(inventory), *PREFLIGHT]) == 1
    first = read_summary(sorted((tmp_path / "runs").iterdir())[-1])
    assert first["hosts_failed"] == ["gpu02"]
    assert "at least 1000000000 MiB" in first["hosts"]["gpu02"]["failures"][0]["message"]
    assert first["hosts"]["gpu01"]["status"] == "ok"

    write_local_inventory(inventory)  # the operator fixes the inventory
    assert main(["apply", "--inventory", str(inventory), "--retry-failed", *PREFLIGHT]) == 0
    retry = read_summary(sorted((tmp_path / "runs").iterdir())[-1])
    assert retry["limit"] == "gpu02"
    assert set(retry["hosts"]) == {"gpu02"}


def test_retry_failed_without_an_earlier_run_is_bad_input(tmp_path: Path):
    inventory = write_local_inventory(tmp_path / "inv")
    assert main(["apply", "--inventory", str(inventory), "--retry-failed", *PREFLIGHT]) == 2


def test_check_reports_drift_with_exit_3(tmp_path: Path, capsys):
    inventory = write_local_inventory(tmp_path / "inv")
    assert main(["apply", "--inventory", str(inventory), *PREFLIGHT]) == 0
    assert main(["check", "--inventory", str(inventory), *PREFLIGHT]) == 0
    fact = inventory / "nodes" / "gpu01" / "facts.d" / "provision_host.fact"
    fact.write_text('{"edited": "by hand"}\n')
    capsys.readouterr()
    assert main(["check", "--inventory", str(inventory), *PREFLIGHT]) == 3
    summary = read_summary(sorted((tmp_path / "runs").iterdir())[-1])
    assert [c["host"] for c in summary["changes"]] == ["gpu01"]
    assert summary["changes"][0]["phase"] == "preflight"
    assert "what would change" in capsys.readouterr().out
    assert fact.read_text() == '{"edited": "by hand"}\n'  # check mode changed nothing


INTERRUPTED_RUN = """
import sys
from pathlib import Path
from provisioner.inventory.loader import load_inventory
from provisioner.ansible.runner import RunRequest, run_playbook
request = RunRequest(command="apply", playbook=sys.argv[1], inventory=load_inventory(sys.argv[2]),
                     runs_dir=Path(sys.argv[3]))
sys.exit(run_playbook(request).exit_code)
"""


def test_interrupted_run_still_writes_its_record(tmp_path: Path):
    inventory = write_local_inventory(tmp_path / "inv", {"gpu01": {"probe_sleep": 60}})
    runs = tmp_path / "runs"
    process = subprocess.Popen([sys.executable, "-c", INTERRUPTED_RUN, str(PROBE), str(inventory), str(runs)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        events = list(runs.glob("*/events.jsonl"))
        if events and "Sleep when asked" in events[0].read_text():
            break
        time.sleep(0.2)
    time.sleep(1)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    summary = read_summary(next(runs.iterdir()))
    assert summary["interrupted"] is True and summary["exit_code"] == 130
    assert "interrupted" in output


def test_plain_progress_lines_when_not_a_terminal(tmp_path: Path):
    inventory = write_local_inventory(tmp_path / "inv", {"gpu02": {"probe_fail": True}})
    result = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_RUN, str(PROBE), str(inventory), str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "PLAY Probe" in result.stdout
    assert "[Probe] Fail on the hosts told to" in result.stdout
    assert "FAILED gpu02: gpu02 was told to fail" in result.stdout
    assert "gpu02" in result.stdout.split("provision apply")[-1]  # the recap table lists it
