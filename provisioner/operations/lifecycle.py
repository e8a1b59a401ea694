"""A GPU node's life in service, step by step, for the commands that take nodes out and bring
them back (replace-node, upgrade): drain, read the fleet's versions and Slurm's states, find an
idle partner, certify inside a maintenance reservation, resume; each step timed and kept in the
command's own run record, a failed step's message its drain reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from provisioner.ansible import playbooks
from provisioner.ansible.playbooks import Caller
from provisioner.ansible.records import new_record_dir, write_private
from provisioner.ansible.runner import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RunOutcome
from provisioner.certify.jobs import busy_nodes
from provisioner.certify.run import CertifyRequest, run_certification
from provisioner.errors import InputError, InputProblem
from provisioner.inventory.model import Inventory
from provisioner.parsers import slurm


class StepFailed(Exception):
    """A step did not succeed; the message is the drain reason's detail. `recorded` holds what
    the failed playbook's roles handed back with set_stats (e.g. the fleet's differences)."""

    def __init__(self, message: str, recorded: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.recorded = recorded or {}


class StepInterrupted(StepFailed):
    """The operator interrupted a step (Ctrl-C, SIGTERM): handled like a failed step (the nodes
    stay drained, the record is written), and the command exits 130."""

    def __init__(self) -> None:
        super().__init__("interrupted")


def step_result(error: BaseException) -> str:
    """How a command's record names the end a step's error brought: interrupted or failed."""
    return "interrupted" if isinstance(error, StepInterrupted) else "failed"


def exit_code_for(error: BaseException) -> int:
    """The command's exit code after a step raised error: 130 where it was interrupted, else 1."""
    return EXIT_INTERRUPTED if isinstance(error, StepInterrupted) else EXIT_FAILED


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class StepRecord:
    name: str
    started: str
    duration_s: float = 0.0
    ok: bool = False
    detail: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    run_record: str | None = None


def run_step(current: StepRecord, action: Callable[[StepRecord], None], save: Callable[[], None],
             recorded: tuple[type[Exception], ...] = (StepFailed,)) -> None:
    """Run one step's action and time it; the record is saved after it, however it ends.

    A `recorded` error's message becomes the step's detail and goes on up; an interrupt outside
    a playbook run (a wait between two of them) becomes StepInterrupted."""
    clock = time.monotonic()
    try:
        action(current)
        current.ok = True
    except recorded as error:
        current.detail = str(error)
        raise
    except KeyboardInterrupt:
        current.detail = "interrupted"
        raise StepInterrupted from None
    finally:
        current.duration_s = round(time.monotonic() - clock, 1)
        save()


class CommandRecord:
    """A command's own run record (`<command>.json` in a `<command>-steps` record folder): its
    document, and the steps of each node, written again after every change.

    With one node (replace-node) the steps are the document's `steps`; with several (upgrade)
    each node's entry under `nodes` holds its own."""

    def __init__(self, runs_dir: Path, command: str, document: dict[str, Any], console: Console,
                 one_node: str | None = None) -> None:
        self.command, self.console, self.one_node = command, console, one_node
        self.folder = new_record_dir(runs_dir, f"{command}-steps")
        self.document = {"command": command, **document}
        self.steps: dict[str, list[StepRecord]] = {}

    def save(self) -> None:
        if self.one_node is not None:
            shown = {**self.document, "steps": [asdict(s) for s in self.steps.get(self.one_node, [])]}
        else:
            nodes = {node: {**self.document.get("nodes", {}).get(node, {}), "steps": [asdict(s) for s in steps]}
                     for node, steps in self.steps.items()}
            shown = {**self.document, "nodes": nodes}
        write_private(self.folder / f"{self.command}.json", json.dumps(shown, indent=2) + "\n")

    def node(self, node: str) -> dict[str, Any]:
        """The node's entry under `nodes` (its result, changes, drain reason)."""
        return self.document.setdefault("nodes", {}).setdefault(node, {})

    def step(self, nodes: list[str], name: str, action: Callable[[StepRecord], None],
             recorded: tuple[type[Exception], ...] = (StepFailed,)) -> StepRecord:
        """Run one step for these nodes (one record each, the same outcome); a recorded error goes on up."""
        current = StepRecord(name, now())
        for node in nodes:
            self.steps.setdefault(node, []).append(current)
        self.save()
        self.console.rule(f"{self.command} {', '.join(nodes)}: {name}")
        run_step(current, action, self.save, recorded)
        return current

    def finish(self, result: str, **fields: Any) -> None:
        self.document.update({"result": result, **fields, "finished": now()})
        self.save()


def check_host(inventory: Inventory, node: str) -> None:
    if node not in inventory.hosts:
        raise InputError([InputProblem(str(inventory.hosts_file), "all",
                                       f"{node} is not a host of inventory {inventory.name} (add the "
                                       "replacement's address to the inventory first)")])


def check_gpu_node(inventory: Inventory, node: str) -> None:
    if node not in inventory.group("gpu_nodes"):
        raise InputError([InputProblem(str(inventory.hosts_file), "gpu_nodes",
                                       f"{node} is not a GPU node of inventory {inventory.name} (add the "
                                       "replacement's address under gpu_nodes first)")])


def host_roles(inventory: Inventory, node: str) -> list[str]:
    """The groups a host serves in (controller, monitoring, login, gpu_nodes), for the record."""
    return [group for group in ("controller", "monitoring", "login", "gpu_nodes") if node in inventory.group(group)]


def only_unreachable(summary: dict[str, Any]) -> bool:
    """Whether a run's only trouble was hosts it could not reach: some unreachable, none failed."""
    return bool(summary.get("hosts_unreachable")) and not summary.get("hosts_failed")


def _checked(outcome: RunOutcome, playbook: str, tolerate_unreachable: bool = False) -> Path:
    """The run's record; StepFailed naming each failed host's first failure, StepInterrupted."""
    if outcome.exit_code == EXIT_INTERRUPTED:
        raise StepInterrupted
    if outcome.exit_code != EXIT_OK and not (tolerate_unreachable and only_unreachable(outcome.summary)):
        failures = [f"{host}: {_first_line(reason)}" for host, result in outcome.summary.get("hosts", {}).items()
                    for reason in (result.get("failures") or [])[:1]]
        raise StepFailed("; ".join(failures)[:300] or f"{playbook} exited {outcome.exit_code}",
                         outcome.summary.get("recorded") or {})
    return outcome.record


def _first_line(failure: Any) -> str:
    """A run record's failure ({phase, task, message} or text) as one line: the task and its message's first line."""
    if isinstance(failure, dict):
        message = str(failure.get("message") or "").strip().splitlines()
        return f"{failure.get('task', '?')}: {message[0] if message else 'failed'}"
    return str(failure).strip().splitlines()[0] if str(failure).strip() else "failed"


def step_playbook(caller: Caller, console: Console, command: str, playbook: str, extravars: dict[str, Any],
                  limit: str | None = None) -> RunOutcome:
    """Run one step's playbook; its outcome, or StepFailed naming each failed host's first failure."""
    outcome = playbooks.run(caller, console, command, playbook, extravars, limit=limit)
    _checked(outcome, playbook)
    return outcome


def handed_playbook(caller: Caller, console: Console, command: str, playbook: str, key: str,
                    extravars: dict[str, Any], tolerate_unreachable: bool = False) -> tuple[dict[str, Any], Path]:
    """Run a playbook that hands a JSON file back; its content and the run record.

    With tolerate_unreachable, a run whose only trouble was unreachable hosts is not a failure:
    the caller reads which hosts answered from what the playbook handed back."""
    handed, outcome = playbooks.handed(caller, console, command, playbook, key, extravars)
    record = _checked(outcome, playbook, tolerate_unreachable)
    if handed is None:  # the playbook ended before handing anything (every host unreachable)
        raise StepFailed(f"{playbook} handed nothing back (no host answered)")
    return handed, record


@dataclass
class FleetRead:
    """fleet_versions.yml's answer: the differences among the GPU nodes that answered over SSH."""

    differences: list[dict[str, str]]
    compared: list[str]
    unreachable: list[str]
    record: Path


def read_fleet(caller: Caller, console: Console, command: str) -> FleetRead:
    """Every GPU node's versions compared with the pins and the fleet. A node that does not answer
    over SSH is left out of the comparison and named, not a failed read."""
    handed, record = handed_playbook(caller, console, command, "fleet_versions.yml", "_fleet_output", {},
                                     tolerate_unreachable=True)
    unreachable = [node for node in caller.inventory.group("gpu_nodes") if node not in handed["nodes"]]
    return FleetRead(handed["differences"], handed["nodes"], unreachable, record)


@dataclass
class SlurmRead:
    """slurm_states.yml's answer: every node's states and reasons, as sinfo printed them."""

    states: dict[str, set[str]]
    reasons: dict[str, str]
    sinfo: str
    record: Path


def read_slurm(caller: Caller, console: Console, command: str) -> SlurmRead:
    handed, record = handed_playbook(caller, console, command, "slurm_states.yml", "_states_output", {})
    return SlurmRead(slurm.node_states(handed["sinfo"]), slurm.node_reasons(handed.get("reasons", "")),
                     handed["sinfo"], record)


def drain_nodes(caller: Caller, console: Console, command: str, nodes: list[str], reason: str,
                force: bool, wait_s: int) -> Path:
    """Drain the nodes in Slurm with the reason; wait up to wait_s for their jobs (0: do not wait)."""
    outcome = playbooks.drain(caller, console, command, dict.fromkeys(nodes, reason), force, wait_s)
    return _checked(outcome, "drain.yml")


def wait_for_idle(caller: Caller, console: Console, command: str, node: str, candidates: list[str],
                  wait_s: int) -> tuple[list[str], str]:
    """The idle healthy nodes among the candidates to pair `node` with, and the sinfo they were read
    from, waiting up to wait_s for one."""
    deadline = time.monotonic() + wait_s
    while True:
        sinfo = read_slurm(caller, console, command).sinfo
        busy = {line.split(":", 1)[0] for line in busy_nodes(sinfo, candidates, "", "")}
        idle = [n for n in candidates if n not in busy]
        if idle:
            return idle, sinfo
        if time.monotonic() > deadline:
            raise StepFailed(f"no idle healthy node to pair {node} with within {wait_s} s "
                             f"({', '.join(sorted(busy))} busy)")
        time.sleep(15)


def certify_in_reservation(caller: Caller, console: Console, step: StepRecord, command: str, node: str,
                           partner: str, reservation: str, steps: int, version_exempt: tuple[str, ...] = ()) -> None:
    """Hold node and partner in a maintenance reservation, resume the node inside it and certify
    the pair; StepFailed names the node's failed checks."""
    step.evidence.update({"partner": partner, "reservation": reservation})
    _checked(playbooks.reservation(caller, console, f"{command}-reserve", reservation, "create", [node, partner]),
             "reservation.yml")
    # Inside the maintenance reservation the resumed node takes only provisioning's jobs.
    _checked(playbooks.resume(caller, console, f"{command}-resume", [node]), "resume.yml")
    code, record, document = run_certification(CertifyRequest(
        inventory=caller.inventory, runs_dir=caller.runs_dir, nodes=[node, partner], steps=steps,
        reservation=reservation, argv=caller.argv, version_exempt=version_exempt), console)
    step.run_record = str(record) if record else None
    if code == EXIT_INTERRUPTED:
        raise StepInterrupted
    if document is None:
        raise StepFailed("certification did not run (see its run record)")
    verdict = document["node_verdicts"].get(node, {})
    step.evidence["certification"] = {"certified": document["certified"],
                                      "node_verdicts": document["node_verdicts"]}
    if code != EXIT_OK or not verdict.get("certified"):
        failed = verdict.get("failed_checks") or [c["name"] for c in document["checks"] if not c["passed"]]
        raise StepFailed(", ".join(failed) or "not certified")


def release_reservation(caller: Caller, console: Console, command: str, reservation: str) -> Path:
    """Delete the maintenance reservation (if any): a resumed node is then open to every user."""
    return _checked(playbooks.reservation(caller, console, command, reservation, "delete"), "reservation.yml")


def check_in_service(node: str, states: dict[str, set[str]], step: StepRecord) -> None:
    """After a resume: the node is known to Slurm and neither out of service nor held for maintenance."""
    seen = sorted(states.get(node, set()))
    step.evidence["states"] = seen
    if not slurm.in_service(set(seen)):
        raise StepFailed(f"not in service after the resume: {', '.join(seen) or 'unknown to Slurm'}")


def fleet_differences(recorded: dict[str, Any], nodes: list[str]) -> list[dict[str, str]]:
    """The differences from the fleet the firmware role handed back (set_stats
    provision_fleet_differences) for these nodes: why their build failed, if that is why."""
    handed = recorded.get("provision_fleet_differences") or {}
    return [row for node in nodes for row in handed.get(node, [])]
