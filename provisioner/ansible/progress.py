"""Live progress of an Ansible run and its per-host recap.

On a terminal: a rich live panel (phase, task, hosts done/failed). Otherwise: one plain
line per play, task and host problem, so CI logs stay readable.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from provisioner.ansible.run_state import RunState


class Progress:
    """Receives run-state updates and renders them."""

    def __init__(self, state: RunState, console: Console | None = None):
        self.state = state
        self.console = console or Console()
        self.live: Live | None = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.live = Live(self._panel(), console=self.console, refresh_per_second=8, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)
            self.live = None

    def _panel(self) -> Table:
        table = Table.grid(padding=(0, 1))
        state = self.state
        table.add_row("[bold]phase[/]", state.phase or "-")
        table.add_row("[bold]task[/]", state.task or "-")
        done = sum(1 for host in state.hosts.values() if host.finished_task)
        table.add_row("[bold]hosts[/]", f"{done}/{len(state.task_hosts) or '-'} done on this task, "
                      f"[red]{len(state.failed_hosts())} failed[/], {len(state.unreachable_hosts())} unreachable")
        return table

    def _line(self, text: str, style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""), soft_wrap=True)

    def on_play(self, name: str) -> None:
        self._line(f"PLAY {name}", "bold")
        self._refresh()

    def on_task(self, phase: str, name: str) -> None:
        if self.live is None:
            self._line(f"[{phase}] {name}")
        self._refresh()

    def on_host_result(self, host: str, outcome: str, message: str) -> None:
        if outcome in ("failed", "unreachable"):
            self._line(f"  {outcome.upper()} {host}: {message}", "red")
        elif outcome == "changed" and self.live is None:
            self._line(f"  changed {host}", "yellow")
        self._refresh()

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._panel())


def first_line(message: str) -> str:
    lines = message.splitlines()
    return (lines[0] + " (details below)") if len(lines) > 1 else message


def failure_details(summary: dict[str, Any]) -> list[Text]:
    """The failures whose message is more than one line (a table of ports or versions), verbatim."""
    details = []
    for host, result in sorted(summary["hosts"].items()):
        for failure in result["failures"]:
            if "\n" in failure["message"]:
                details.append(Text(f"{host}: {failure['phase']} / {failure['task']}", style="bold red"))
                details.append(Text(failure["message"]))
    return details


def recap_table(summary: dict[str, Any]) -> Table:
    table = Table(title=f"provision {summary['command']}: {summary['inventory']}", title_justify="left")
    for column in ("host", "status", "ok", "changed", "failed", "unreachable", "skipped", "reason"):
        table.add_column(column, overflow="fold")
    styles = {"ok": "green", "failed": "red", "unreachable": "red", "not run": "yellow"}
    for host, result in sorted(summary["hosts"].items()):
        reason = "; ".join(f"{f['phase']} / {f['task']}: {first_line(f['message'])}" for f in result["failures"][:2])
        table.add_row(host, Text(result["status"], style=styles.get(result["status"], "")), str(result["ok"]),
                      str(result["changed"]), str(result["failed"]), str(result["unreachable"]),
                      str(result["skipped"]), reason)
    return table


def changes_table(changes: list[dict[str, Any]]) -> Table:
    table = Table(title="what would change", title_justify="left")
    for column in ("host", "phase", "task", "diff"):
        table.add_column(column, overflow="fold")
    for change in changes:
        table.add_row(change["host"], change["phase"], change["task"], change.get("diff", ""))
    return table
