"""Calling the project's small playbooks from Python: the extra variables each one expects
(drain, resume, reservation) and the JSON file a playbook hands back to the CLI.

The playbooks' variables are a contract; this module is its one Python side.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from provisioner.ansible.runner import RunOutcome, RunRequest, run_playbook
from provisioner.inventory.model import Inventory

# Slurm keeps a reason of any length, but sinfo's columns and the operators' eyes do not.
REASON_LIMIT = 120


class Caller(Protocol):
    """What a playbook run needs of a command's request (certify's, replace-node's, upgrade's)."""

    inventory: Inventory
    runs_dir: Path
    argv: list[str]


def run(caller: Caller, console: Console, command: str, playbook: str, extravars: dict[str, Any] | None = None,
        limit: str | None = None, on_event: Callable[[dict[str, Any]], None] | None = None) -> RunOutcome:
    """One playbook run on the caller's inventory, recorded under the caller's runs folder."""
    return run_playbook(RunRequest(command=command, playbook=playbook, inventory=caller.inventory,
                                   runs_dir=caller.runs_dir, extravars=extravars or {}, argv=caller.argv or [],
                                   limit=limit, on_event=on_event), console)


def drain_reason(text: str) -> str:
    """A reason as Slurm will show it: on one line, at most REASON_LIMIT characters."""
    return " ".join(text.split())[:REASON_LIMIT]


def drain(caller: Caller, console: Console, command: str, reasons: dict[str, str], force: bool = False,
          wait_s: int = 0) -> RunOutcome:
    """drain.yml: drain each node with its reason; requeue their jobs (force); wait up to wait_s
    for their jobs to end (0: do not wait)."""
    return run(caller, console, command, "drain.yml", {
        "_drain": [{"node": node, "reason": drain_reason(reason)} for node, reason in reasons.items()],
        "_drain_force": force, "_drain_wait_s": wait_s})


def resume(caller: Caller, console: Console, command: str, nodes: list[str]) -> RunOutcome:
    """resume.yml: resume the nodes in Slurm and wait until none is drained, down or failing."""
    return run(caller, console, command, "resume.yml", {"_resume": list(nodes)})


def reservation(caller: Caller, console: Console, command: str, name: str, action: str,
                nodes: list[str] | None = None) -> RunOutcome:
    """reservation.yml: create (on nodes) or delete the maintenance reservation `name`."""
    extravars: dict[str, Any] = {"_reservation_name": name, "_reservation_action": action}
    if nodes is not None:
        extravars["_reservation_nodes"] = list(nodes)
    return run(caller, console, command, "reservation.yml", extravars)


def read_handed(path: Path) -> dict[str, Any] | None:
    """A playbook's hand-over file, or None when the run stopped before writing it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@contextmanager
def scratch(prefix: str = "provision-") -> Iterator[Path]:
    """A private folder for the files a playbook hands back, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield Path(folder)


def handed(caller: Caller, console: Console, command: str, playbook: str, key: str,
           extravars: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, RunOutcome]:
    """Run a playbook that writes a JSON file for the CLI (its path in the variable `key`); the
    file's content (None when the playbook ended before writing it) and the run's outcome."""
    with scratch() as folder:
        output = folder / "handed.json"
        outcome = run(caller, console, command, playbook, {**(extravars or {}), key: str(output)})
        return read_handed(output), outcome
