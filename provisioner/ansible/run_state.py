"""What an Ansible run has done so far, built from ansible-runner's events.

Pure bookkeeping (no I/O): the progress display reads it live and the run record's
summary is made from it at the end.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from typing import Any

SKIP_PHASE = "-"


@dataclass
class HostResult:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    finished_task: bool = False

    @property
    def status(self) -> str:
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        if self.ok or self.changed or self.skipped:
            return "ok"
        return "not run"


# A failure message is kept whole (tables of ports or versions are evidence), up to this size.
MESSAGE_LIMIT = 8000


def _message(result: dict[str, Any]) -> str:
    message = result.get("msg") or result.get("stderr") or result.get("reason") or ""
    if not message and result.get("results"):
        failed = [r for r in result["results"] if isinstance(r, dict) and r.get("failed")]
        message = _message(failed[0]) if failed else ""
    text = "\n".join(line.rstrip() for line in str(message).strip().splitlines())
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


def summarize_diff(diff: Any) -> str:
    """A one-line account of a module's --diff output."""
    parts = diff if isinstance(diff, list) else [diff]
    described = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        header = part.get("after_header") or part.get("before_header") or ""
        before, after = part.get("before", ""), part.get("after", "")
        if isinstance(before, str) and isinstance(after, str):
            lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
            added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
            removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
            if added or removed:
                described.append(f"{header}: +{added} -{removed} lines".strip(": "))
                continue
        if isinstance(before, dict) and isinstance(after, dict):
            keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            if keys:
                described.append(f"{header} {', '.join(f'{k}: {before.get(k)} -> {after.get(k)}' for k in keys)}"
                                 .strip())
                continue
        if part.get("prepared"):
            described.append(str(part["prepared"]).strip().splitlines()[0][:200])
    return "; ".join(described)


@dataclass
class RunState:
    """Accumulates a run's progress from its events."""

    play: str = ""
    phase: str = ""
    task: str = ""
    hosts: dict[str, HostResult] = field(default_factory=dict)
    task_hosts: set[str] = field(default_factory=set)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    phase_tasks: dict[str, int] = field(default_factory=dict)
    changes: list[dict[str, str]] = field(default_factory=list)
    stats_seen: bool = False
    recorded: dict[str, Any] = field(default_factory=dict)
    _phase_started: float | None = None

    def host(self, name: str) -> HostResult:
        return self.hosts.setdefault(name, HostResult())

    def failed_hosts(self) -> list[str]:
        return sorted(h for h, r in self.hosts.items() if r.status == "failed")

    def unreachable_hosts(self) -> list[str]:
        return sorted(h for h, r in self.hosts.items() if r.status == "unreachable")

    def _enter_phase(self, phase: str, now: float) -> None:
        if self.phase and self._phase_started is not None:
            self.phase_seconds[self.phase] = self.phase_seconds.get(self.phase, 0.0) + now - self._phase_started
        self.phase = phase
        self._phase_started = now

    def finish(self, now: float | None = None) -> None:
        self._enter_phase("", now if now is not None else time.monotonic())

    def apply(self, event: dict[str, Any], now: float | None = None) -> tuple[str, ...] | None:
        """Update from one event; return what the display should show, if anything."""
        now = now if now is not None else time.monotonic()
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "") or data.get("name", "")
            return ("play", self.play)
        if kind == "playbook_on_task_start":
            phase = data.get("role") or self.play or SKIP_PHASE
            if phase != self.phase:
                self._enter_phase(phase, now)
            self.task = data.get("task", "")
            self.phase_tasks[phase] = self.phase_tasks.get(phase, 0) + 1
            self.task_hosts = set()
            for host in self.hosts.values():
                host.finished_task = False
            return ("task", phase, self.task)
        host_name = data.get("host")
        if not host_name or kind.startswith("runner_item") or kind in ("runner_on_start", "runner_retry"):
            return self._stats(kind, data)
        result = data.get("res") or {}
        host = self.host(host_name)
        self.task_hosts.add(host_name)
        host.finished_task = True
        phase = data.get("role") or self.phase or SKIP_PHASE
        task = data.get("task", self.task)
        if kind == "runner_on_failed" and not data.get("ignore_errors"):
            host.failures.append({"phase": phase, "task": task, "message": _message(result)})
            return ("host", host_name, "failed", _message(result))
        if kind == "runner_on_unreachable":
            host.failures.append({"phase": phase, "task": task, "message": _message(result)})
            return ("host", host_name, "unreachable", _message(result))
        if kind == "runner_on_ok" and result.get("changed"):
            self.changes.append({"host": host_name, "phase": phase, "task": task,
                                 "diff": summarize_diff(result.get("diff"))})
            return ("host", host_name, "changed", "")
        return None

    def _stats(self, kind: str, data: dict[str, Any]) -> None:
        if kind != "playbook_on_stats":
            return None
        self.stats_seen = True
        self.recorded = dict(data.get("artifact_data") or {})
        fields = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
                  "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}
        for source, target in fields.items():
            for host_name, count in (data.get(source) or {}).items():
                setattr(self.host(host_name), target, int(count))
        return None
