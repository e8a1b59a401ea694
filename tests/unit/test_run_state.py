"""Run bookkeeping from ansible-runner events, and the progress display fed by it."""

from __future__ import annotations

import io

from rich.console import Console

from provisioner.ansible.progress import Progress, recap_table
from provisioner.ansible.run_state import RunState, summarize_diff


def _events() -> list[dict]:
    return [
        {"event": "playbook_on_play_start", "event_data": {"play": "Preflight"}},
        {"event": "playbook_on_task_start", "event_data": {"task": "Check GPUs", "role": "preflight"}},
        {"event": "runner_on_ok", "event_data": {"host": "gpu01", "task": "Check GPUs", "role": "preflight",
                                                 "res": {"changed": False}}},
        {"event": "runner_on_failed", "event_data": {"host": "gpu02", "task": "Check GPUs", "role": "preflight",
                                                     "res": {"msg": "gpu02: 7 GPUs"}}},
        {"event": "runner_on_failed", "event_data": {"host": "gpu01", "task": "Check GPUs", "role": "preflight",
                                                     "ignore_errors": True, "res": {"msg": "ignored"}}},
        {"event": "playbook_on_task_start", "event_data": {"task": "Write slurm.conf", "role": "slurm"}},
        {"event": "runner_on_ok", "event_data": {"host": "gpu01", "task": "Write slurm.conf", "role": "slurm",
                                                 "res": {"changed": True, "diff": [{"after_header": "/etc/x",
                                                                                    "before": "a\n",
                                                                                    "after": "a\nb\n"}]}}},
        {"event": "runner_on_unreachable", "event_data": {"host": "gpu03", "task": "Write slurm.conf",
                                                          "role": "slurm", "res": {"msg": "No route to host"}}},
        {"event": "playbook_on_stats", "event_data": {"ok": {"gpu01": 2}, "changed": {"gpu01": 1},
                                                      "failures": {"gpu02": 1}, "dark": {"gpu03": 1},
                                                      "skipped": {}, "ignored": {"gpu01": 1}}},
    ]


def test_state_counts_hosts_failures_changes_and_phases():
    state = RunState()
    for second, event in enumerate(_events()):
        state.apply(event, now=float(second))
    state.finish(now=10.0)
    assert state.failed_hosts() == ["gpu02"]
    assert state.unreachable_hosts() == ["gpu03"]
    assert state.hosts["gpu01"].status == "ok" and state.hosts["gpu01"].failures == []  # ignored error
    assert state.hosts["gpu02"].failures == [{"phase": "preflight", "task": "Check GPUs", "message": "gpu02: 7 GPUs"}]
    assert state.changes == [{"host": "gpu01", "phase": "slurm", "task": "Write slurm.conf",
                              "diff": "/etc/x: +1 -0 lines"}]
    assert state.phase_tasks == {"preflight": 1, "slurm": 1}
    assert state.phase_seconds == {"preflight": 4.0, "slurm": 5.0}


def test_diff_summary_of_a_changed_mapping():
    diff = {"before": {"state": "absent"}, "after": {"state": "directory"}, "before_header": "/etc/x"}
    assert summarize_diff(diff) == "/etc/x state: absent -> directory"


def test_terminal_progress_shows_a_live_panel_and_failures():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    state = RunState()
    with Progress(state, console) as progress:
        assert progress.live is not None
        for event in _events()[:4]:
            shown = state.apply(event)
            if shown and shown[0] == "host":
                progress.on_host_result(*shown[1:])
            elif shown and shown[0] == "task":
                progress.on_task(*shown[1:])
    output = buffer.getvalue()
    assert "FAILED gpu02: gpu02: 7 GPUs" in output
    assert "phase" in output and "Check GPUs" in output


def test_recap_table_lists_every_host_with_its_reason():
    summary = {"command": "apply", "inventory": "lab", "hosts": {
        "gpu01": {"status": "ok", "ok": 3, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 0, "failures": []},
        "gpu02": {"status": "failed", "ok": 1, "changed": 0, "failed": 1, "unreachable": 0, "skipped": 0,
                  "failures": [{"phase": "preflight", "task": "Check GPUs", "message": "7 GPUs"}]},
    }}
    buffer = io.StringIO()
    Console(file=buffer, width=160).print(recap_table(summary))
    text = buffer.getvalue()
    assert "gpu01" in text and "preflight / Check GPUs: 7 GPUs" in text
