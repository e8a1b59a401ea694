"""Run a playbook through ansible-runner: live progress, per-host recap, run record, lock."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ansible_runner
from rich.console import Console

from provisioner.ansible.lock import inventory_lock
from provisioner.ansible.progress import Progress, changes_table, failure_details, recap_table
from provisioner.ansible.records import EVENTS, EventLog, make_private, new_record_dir, write_summary
from provisioner.ansible.redact import Redactor, secret_values
from provisioner.ansible.run_state import RunState
from provisioner.inventory.model import Inventory
from provisioner.paths import ANSIBLE_CONFIG, CALLBACK_PLUGINS_DIR, PLAYBOOKS_DIR, ROLES_DIR

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_DRIFT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


@dataclass
class RunRequest:
    """One playbook run as the user asked for it."""

    command: str
    playbook: str
    inventory: Inventory
    runs_dir: Path
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    check: bool = False
    diff: bool = False
    forks: int | None = None
    extravars: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    # Also shown every event, after the run state took it (a command's own progress).
    on_event: Callable[[dict[str, Any]], None] | None = None


@dataclass
class RunOutcome:
    exit_code: int
    record: Path
    summary: dict[str, Any]


DEFAULT_STRATEGY = "mitogen_linear"


def strategy_environment() -> dict[str, str]:
    """The Ansible strategy of provision's runs: Mitogen's linear by default.

    Mitogen keeps one Python interpreter per host for the whole run and sends it each task,
    where plain Ansible starts a Python (under sudo) for every task on every host: the same
    tasks in the same order (linear), at a fraction of the cost per task. An operator who
    wants Ansible's own strategy sets ANSIBLE_STRATEGY=linear."""
    chosen = os.environ.get("ANSIBLE_STRATEGY") or DEFAULT_STRATEGY
    environment = {"ANSIBLE_STRATEGY": chosen}
    if chosen.startswith("mitogen"):
        import ansible_mitogen.plugins.strategy as mitogen_strategies

        environment["ANSIBLE_STRATEGY_PLUGINS"] = str(Path(mitogen_strategies.__file__).parent)
    return environment


def ansible_environment() -> dict[str, str]:
    """Environment for ansible-playbook: the project's config, roles and callbacks, the venv's
    binaries first, the run's strategy, and host keys checked.

    ansible-runner turns host key checking off unless the environment names it; provision keeps
    it on (as ansible.cfg says) unless the operator's own environment turns it off."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        "ANSIBLE_CONFIG": str(ANSIBLE_CONFIG),
        "ANSIBLE_ROLES_PATH": str(ROLES_DIR),
        # Named here as well as in ansible.cfg: ansible-runner sets this variable (adding its
        # own callback), which would hide the config file's value.
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACK_PLUGINS_DIR),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOST_KEY_CHECKING": os.environ.get("ANSIBLE_HOST_KEY_CHECKING") or "True",
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        **strategy_environment(),
    }


def _playbook_path(name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() else PLAYBOOKS_DIR / name


def _cmdline(request: RunRequest) -> str:
    flags = []
    if request.check:
        flags.append("--check")
    if request.diff:
        flags.append("--diff")
    if request.skip_tags:
        flags += ["--skip-tags", request.skip_tags]
    return " ".join(flags)


class _Interrupt:
    """Turns SIGINT/SIGTERM into a cancel request that ansible-runner polls."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupt:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _exit_code(request: RunRequest, state: RunState, runner_status: str, interrupted: bool) -> int:
    if interrupted:
        return EXIT_INTERRUPTED
    if state.failed_hosts() or state.unreachable_hosts():
        return EXIT_FAILED
    if runner_status != "successful":
        return EXIT_FAILED
    if request.command == "check" and state.changes:
        return EXIT_DRIFT
    return EXIT_OK


def _summary(request: RunRequest, state: RunState, started: datetime, duration: float, runner_status: str,
             runner_rc: int | None, exit_code: int, interrupted: bool) -> dict[str, Any]:
    hosts = {}
    for name, result in state.hosts.items():
        hosts[name] = {
            "status": result.status, "ok": result.ok, "changed": result.changed, "failed": result.failed,
            "unreachable": result.unreachable, "skipped": result.skipped, "rescued": result.rescued,
            "ignored": result.ignored, "failures": result.failures,
        }
    return {
        "command": request.command,
        "argv": request.argv,
        "inventory": request.inventory.name,
        "inventory_path": str(request.inventory.directory.resolve()),
        "playbook": request.playbook,
        "limit": request.limit,
        "tags": request.tags,
        "check": request.check,
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": round(duration, 3),
        "hosts": hosts,
        "totals": {
            "hosts": len(hosts),
            "ok": sum(1 for h in hosts.values() if h["status"] == "ok"),
            "changed": sum(h["changed"] for h in hosts.values()),
            "failed": len(state.failed_hosts()),
            "unreachable": len(state.unreachable_hosts()),
        },
        "hosts_failed": state.failed_hosts(),
        "hosts_unreachable": state.unreachable_hosts(),
        "phases": {phase: {"duration_s": round(seconds, 3), "tasks": state.phase_tasks.get(phase, 0)}
                   for phase, seconds in state.phase_seconds.items()},
        "changes": state.changes if request.check else [],
        # What the roles recorded with set_stats, e.g. provision_versions: the versions each node runs.
        "recorded": state.recorded,
        "runner": {"status": runner_status, "rc": runner_rc},
        "interrupted": interrupted,
        "exit_code": exit_code,
    }


def run_playbook(request: RunRequest, console: Console | None = None) -> RunOutcome:
    """Run the request's playbook under the inventory lock and write its run record."""
    console = console or Console()
    with inventory_lock(request.inventory.directory, request.command):
        return _run_locked(request, console)


def _run_locked(request: RunRequest, console: Console) -> RunOutcome:
    record = new_record_dir(request.runs_dir, request.command)
    redactor = Redactor(secret_values(request.inventory.hostvars))
    events = EventLog(record / EVENTS, redactor)
    state = RunState()
    started, clock = datetime.now(UTC), time.monotonic()
    runner_status, runner_rc = "not started", None
    progress = Progress(state, console)

    def on_event(event: dict[str, Any]) -> bool:
        events.write(event)
        shown = state.apply(event)
        if request.on_event is not None:
            request.on_event(event)
        if shown is None:
            return False
        kind, *rest = shown
        if kind == "play":
            progress.on_play(*rest)
        elif kind == "task":
            progress.on_task(*rest)
        elif kind == "host":
            host, outcome, message = rest
            progress.on_host_result(host, outcome, redactor.text(message))
        return False  # our redacted events.jsonl is the event store, not runner's raw job_events

    # ansible-runner's raw files (stdout with every task's output) stay in a private folder
    # (0700) until scrubbed; a run killed before that leaves them there, never in the record.
    raw = Path(tempfile.mkdtemp(prefix="provision-raw-"))
    (raw / "runner").mkdir()
    with _Interrupt() as interrupt, progress:
        try:
            runner = ansible_runner.run(
                private_data_dir=str(raw / "runner"),
                artifact_dir=str(raw / "artifacts"),
                ident="ansible",
                playbook=str(_playbook_path(request.playbook)),
                inventory=str(request.inventory.hosts_file.resolve()),
                limit=request.limit,
                tags=request.tags,
                forks=request.forks,
                cmdline=_cmdline(request) or None,
                extravars=request.extravars or None,
                envvars=ansible_environment(),
                # ansible.cfg's in-memory fact cache: runner's default (a JSON file per host,
                # stat'ed on every read) costs the controller time on every task.
                fact_cache_type="memory",
                event_handler=on_event,
                cancel_callback=lambda: interrupt.requested,
                quiet=True,
                suppress_env_files=True,
            )
            runner_status, runner_rc = runner.status, runner.rc
        except Exception as error:  # still write the record, then say what broke
            runner_status = f"error: {error}"
        finally:
            events.close()
            state.finish()
    interrupted = interrupt.requested or runner_status == "canceled"
    exit_code = _exit_code(request, state, runner_status, interrupted)
    summary = _summary(request, state, started, time.monotonic() - clock, runner_status, runner_rc, exit_code,
                       interrupted)
    redactor.files(raw)
    make_private(raw)
    for part in ("runner", "artifacts"):
        if (raw / part).exists():
            shutil.move(raw / part, record / part)
    shutil.rmtree(raw, ignore_errors=True)
    write_summary(record, summary, redactor)
    if runner_status not in ("successful", "failed", "canceled") or (runner_status == "failed" and not
                                                                      state.hosts):
        stdout = record / "artifacts" / "ansible" / "stdout"
        tail = stdout.read_text(errors="replace")[-2000:] if stdout.exists() else ""
        console.print(f"[red]ansible-playbook did not run the play ({runner_status}, rc {runner_rc}):[/]\n{tail}")
    console.print(recap_table(summary))
    for detail in failure_details(summary):
        console.print(detail, soft_wrap=True)
    if request.command == "check" and state.changes:
        console.print(changes_table(state.changes))
    if interrupted:
        console.print("[yellow]interrupted: the run was cancelled; its record was written[/]")
    console.print(f"run record: {record}")
    return RunOutcome(exit_code, record, summary)
