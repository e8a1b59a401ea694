"""The certification's progress on screen while the driver runs: the round, the jobs done,
running and failed, failures and named nodes as they happen, and the time left. Plain lines
(they print above the Ansible panel on a terminal, and read well in CI logs)."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.text import Text

WAIT_TASK = "Certify | Wait for the rounds"
SUMMARY_EVERY_S = 20.0


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


class CertifyProgress:
    """Reads the driver's status from the Ansible events of the task that waits for it."""

    def __init__(self, console: Console):
        self.console = console
        self.round_number = 0
        self.failures_seen = 0
        self.named_seen: set[str] = set()
        self.last_summary = ""
        self.last_printed = 0.0

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("event") not in ("runner_retry", "runner_on_ok", "runner_on_failed"):
            return
        data = event.get("event_data") or {}
        if data.get("task") != WAIT_TASK:
            return
        try:
            status = json.loads((data.get("res") or {}).get("stdout") or "")
        except ValueError:
            return
        if isinstance(status, dict):
            self.show(status)

    def _line(self, text: str, style: str = "") -> None:
        self.console.print(Text(text, style=style), soft_wrap=True)

    def show(self, status: dict[str, Any]) -> None:
        current = status.get("round") or {}
        number = int(current.get("number") or 0)
        if number and number != self.round_number:
            self.round_number = number
            kind = "to localise" if current.get("kind") == "localise" else "of the schedule"
            self._line(f"round {number} ({kind}, {status.get('base_rounds')} base rounds): {current.get('name')}: "
                       f"{current.get('jobs')} job(s) at once", "bold")
        failures = status.get("failures") or []
        total = int(status.get("failures_total") or len(failures))
        for failure in failures[len(failures) - (total - self.failures_seen):] if total > self.failures_seen else []:
            named = f"; names {', '.join(failure['named'])}" if failure.get("named") else ""
            self._line(f"  {failure['status'].upper()} {failure['job']}: {failure.get('reason', '')[:200]}{named}",
                       "red")
        self.failures_seen = max(self.failures_seen, total)
        for node, why in sorted((status.get("named") or {}).items()):
            if node not in self.named_seen:
                self.named_seen.add(node)
                self._line(f"  named {node}: {why[-1] if why else ''}"[:300], "red")
        if current:
            summary = (f"  round {number}: {current.get('done')}/{current.get('jobs')} jobs done, "
                       f"{current.get('running')} running, {current.get('failed')} failed; "
                       f"about {_minutes(status.get('estimate_left_s'))} left")
            now = time.monotonic()
            if summary != self.last_summary and (now - self.last_printed >= SUMMARY_EVERY_S
                                                 or current.get("done") == current.get("jobs")):
                self.last_summary, self.last_printed = summary, now
                self._line(summary)
