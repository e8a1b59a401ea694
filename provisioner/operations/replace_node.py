"""provision replace-node: rebuild one machine of the cluster, step by step.

A GPU node is drained, rebuilt, compared with the fleet, certified and resumed; a failed step
leaves it drained with the step as the reason. The controller, a monitoring host or a login
node is rebuilt (known hosts, every phase it has, the cluster-wide files everywhere) and the
cluster checked: every GPU node still in service. Each step is recorded (name, start,
duration, outcome, evidence, the run record of its playbook) in the command's own run record,
`replace-node.json`; a failed step exits 1.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from provisioner.ansible import known_hosts
from provisioner.ansible.lock import inventory_lock
from provisioner.ansible.records import new_record_dir, write_private
from provisioner.ansible.runner import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RunRequest, run_playbook
from provisioner.certify.jobs import busy_nodes
from provisioner.certify.run import CertifyRequest, run_certification
from provisioner.errors import InputError, InputProblem
from provisioner.facts.fleet import table as fleet_table
from provisioner.inventory.loader import Inventory
from provisioner.parsers import slurm

REASON_LIMIT = 120


class StepFailed(Exception):
    """A step did not succeed; the message is the drain reason's detail."""


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


@dataclass
class ReplaceRequest:
    inventory: Inventory
    node: str
    runs_dir: Path
    reason: str = "hardware replaced"
    force: bool = False
    allow_firmware_update: bool = False
    steps: int = 200
    drain_wait_s: int = 3600
    partner_wait_s: int = 600
    argv: list[str] = field(default_factory=list)
    # The new machine's host key fingerprint the operator checked (SHA256:...); None: asked
    # on a terminal, refused elsewhere.
    accept_host_key: str | None = None
    ask: Callable[[str], str] | None = None


@dataclass
class StepRecord:
    name: str
    started: str
    duration_s: float = 0.0
    ok: bool = False
    detail: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    run_record: str | None = None


def check_host(inventory: Inventory, node: str) -> None:
    if node not in inventory.hosts:
        raise InputError([InputProblem(str(inventory.hosts_file), "all",
                                       f"{node} is not a host of inventory {inventory.name} (add the "
                                       "replacement's address to the inventory first)")])


def host_roles(inventory: Inventory, node: str) -> list[str]:
    """The groups a host serves in (controller, monitoring, login, gpu_nodes), for the record."""
    return [group for group in ("controller", "monitoring", "login", "gpu_nodes") if node in inventory.group(group)]


def check_node(inventory: Inventory, node: str) -> None:
    if node not in inventory.group("gpu_nodes"):
        raise InputError([InputProblem(str(inventory.hosts_file), "gpu_nodes",
                                       f"{node} is not a GPU node of inventory {inventory.name} (add the "
                                       "replacement's address under gpu_nodes first)")])


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


class StepContext(Protocol):
    """What a step's playbook runs need of a command's request (replace-node's, upgrade's)."""

    inventory: Inventory
    runs_dir: Path
    argv: list[str]


def only_unreachable(summary: dict[str, Any]) -> bool:
    """Whether a run's only trouble was hosts it could not reach: some unreachable, none failed."""
    return bool(summary.get("hosts_unreachable")) and not summary.get("hosts_failed")


def step_playbook(request: StepContext, console: Console, command: str, playbook: str,
                  extravars: dict[str, Any], limit: str | None = None, tolerate_unreachable: bool = False) -> Path:
    """Run one step's playbook; its run record, or StepFailed naming each failed host's first failure.

    With tolerate_unreachable, a run whose only trouble was unreachable hosts is not a failure:
    the caller reads which hosts answered from what the playbook handed back."""
    outcome = run_playbook(RunRequest(command=command, playbook=playbook, inventory=request.inventory,
                                      runs_dir=request.runs_dir, extravars=extravars, argv=request.argv,
                                      limit=limit), console)
    if outcome.exit_code == EXIT_INTERRUPTED:
        raise StepInterrupted
    if outcome.exit_code != EXIT_OK and not (tolerate_unreachable and only_unreachable(outcome.summary)):
        failures = [f"{host}: {_first_line(reason)}" for host, result in outcome.summary.get("hosts", {}).items()
                    for reason in (result.get("failures") or [])[:1]]
        raise StepFailed("; ".join(failures)[:300] or f"{playbook} exited {outcome.exit_code}")
    return outcome.record


def _first_line(failure: Any) -> str:
    """A run record's failure ({phase, task, message} or text) as one line: the task and its message's first line."""
    if isinstance(failure, dict):
        message = str(failure.get("message") or "").strip().splitlines()
        return f"{failure.get('task', '?')}: {message[0] if message else 'failed'}"
    return str(failure).strip().splitlines()[0] if str(failure).strip() else "failed"


def handed_playbook(request: StepContext, console: Console, command: str, playbook: str, key: str,
                    extravars: dict[str, Any], tolerate_unreachable: bool = False) -> tuple[dict[str, Any], Path]:
    """Run a playbook that writes a JSON file for the CLI (its path in `key`); return the file's content."""
    with tempfile.TemporaryDirectory(prefix="provision-replace-") as scratch:
        output = Path(scratch) / "out.json"
        record = step_playbook(request, console, command, playbook, {**extravars, key: str(output)},
                               tolerate_unreachable=tolerate_unreachable)
        if not output.exists():  # the playbook ended before handing anything (every host unreachable)
            raise StepFailed(f"{playbook} handed nothing back (no host answered)")
        return json.loads(output.read_text()), record


@dataclass
class FleetRead:
    """fleet_versions.yml's answer: the differences among the GPU nodes that answered over SSH."""

    differences: list[dict[str, str]]
    compared: list[str]
    unreachable: list[str]
    record: Path


def read_fleet(request: StepContext, console: Console, command: str) -> FleetRead:
    """Every GPU node's versions compared with the pins and the fleet. A node that does not answer
    over SSH is left out of the comparison and named, not a failed read."""
    handed, record = handed_playbook(request, console, command, "fleet_versions.yml", "_fleet_output", {},
                                     tolerate_unreachable=True)
    unreachable = [node for node in request.inventory.group("gpu_nodes") if node not in handed["nodes"]]
    return FleetRead(handed["differences"], handed["nodes"], unreachable, record)


def drain_nodes(request: StepContext, console: Console, command: str, nodes: list[str], reason: str,
                force: bool, wait_s: int) -> Path:
    """Drain the nodes in Slurm with the reason; wait up to wait_s for their jobs (0: do not wait)."""
    return step_playbook(request, console, command, "drain.yml", {
        "_drain": [{"node": node, "reason": reason[:REASON_LIMIT]} for node in nodes], "_drain_force": force,
        "_drain_wait_s": wait_s})


def drain(request: ReplaceRequest, console: Console, reason: str, wait: bool) -> Path:
    return drain_nodes(request, console, "drain", [request.node], reason, request.force,
                       request.drain_wait_s if wait else 0)


def wait_for_idle(request: StepContext, console: Console, command: str, node: str, candidates: list[str],
                  wait_s: int) -> tuple[list[str], str]:
    """The idle healthy nodes among the candidates to pair `node` with, and the sinfo they were read
    from, waiting up to wait_s for one."""
    deadline = time.monotonic() + wait_s
    while True:
        handed, _ = handed_playbook(request, console, command, "slurm_states.yml", "_states_output", {})
        busy = {line.split(":", 1)[0] for line in busy_nodes(handed["sinfo"], candidates, "", "")}
        idle = [n for n in candidates if n not in busy]
        if idle:
            return idle, handed["sinfo"]
        if time.monotonic() > deadline:
            raise StepFailed(f"no idle healthy node to pair {node} with within {wait_s} s "
                             f"({', '.join(sorted(busy))} busy)")
        time.sleep(15)


def certify_in_reservation(request: StepContext, console: Console, step: StepRecord, command: str, node: str,
                           partner: str, reservation: str, steps: int, version_exempt: tuple[str, ...] = ()) -> None:
    """Hold node and partner in a maintenance reservation, resume the node inside it and certify
    the pair; StepFailed names the node's failed checks."""
    step.evidence.update({"partner": partner, "reservation": reservation})
    step_playbook(request, console, f"{command}-reserve", "reservation.yml", {
        "_reservation_name": reservation, "_reservation_action": "create", "_reservation_nodes": [node, partner]})
    # Inside the maintenance reservation the resumed node takes only provisioning's jobs.
    step_playbook(request, console, f"{command}-resume", "resume.yml", {"_resume": [node]})
    code, record, document = run_certification(CertifyRequest(
        inventory=request.inventory, runs_dir=request.runs_dir, nodes=[node, partner], steps=steps,
        reservation=reservation, argv=request.argv, version_exempt=version_exempt), console)
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


def release_reservation(request: StepContext, console: Console, command: str, reservation: str) -> Path:
    """Delete the maintenance reservation (if any): a resumed node is then open to every user."""
    return step_playbook(request, console, command, "reservation.yml", {
        "_reservation_name": reservation, "_reservation_action": "delete"})


def check_in_service(node: str, states: dict[str, set[str]], step: StepRecord) -> None:
    """After a resume: the node is known to Slurm and neither drained, down, failing nor reserved."""
    seen = sorted(states.get(node, set()))
    step.evidence["states"] = seen
    if not slurm.in_service(set(seen)):
        raise StepFailed(f"not in service after the resume: {', '.join(seen) or 'unknown to Slurm'}")


def _partner(request: ReplaceRequest, console: Console, step: StepRecord, unreachable: list[str]) -> str:
    """An idle GPU node other than the replaced one and those that did not answer over SSH,
    waiting for one to become idle."""
    others = [n for n in request.inventory.group("gpu_nodes") if n != request.node and n not in unreachable]
    if not others:
        raise StepFailed("no other GPU node to test against")
    idle, sinfo = wait_for_idle(request, console, "replace-node-states", request.node, others,
                                request.partner_wait_s)
    step.evidence["partner_states"] = sinfo
    return idle[0]


def _certify(request: ReplaceRequest, console: Console, step: StepRecord, unreachable: list[str]) -> None:
    partner = _partner(request, console, step, unreachable)
    certify_in_reservation(request, console, step, "replace-node", request.node, partner, _reservation(request),
                           request.steps)


def _release(request: ReplaceRequest, console: Console) -> Path:
    return release_reservation(request, console, "replace-node-release", _reservation(request))


def _reservation(request: ReplaceRequest) -> str:
    return f"provision-replace-{request.node}"


def _slurm_node_states(request: ReplaceRequest, console: Console) -> tuple[dict[str, set[str]], Path]:
    """Every node's Slurm states, read on the controller, and the run record of that read."""
    handed, record = handed_playbook(request, console, "replace-node-states", "slurm_states.yml",
                                     "_states_output", {})
    return slurm.node_states(handed["sinfo"]), record


def _resume(request: ReplaceRequest, console: Console, step: StepRecord) -> None:
    step.run_record = str(_release(request, console))
    check_in_service(request.node, _slurm_node_states(request, console)[0], step)


def _verify_versions(request: ReplaceRequest, console: Console, step: StepRecord) -> None:
    fleet = read_fleet(request, console, "replace-node-versions")
    step.run_record = str(fleet.record)
    differences = fleet.differences
    step.evidence.update({"nodes_compared": fleet.compared, "differences": differences,
                          "unreachable": fleet.unreachable})
    if request.node not in fleet.compared:
        raise StepFailed("its versions could not be read")
    if differences:
        console.print(fleet_table(differences), highlight=False)
        components = sorted({f"{d['component']} {d['found']} (expected {d['expected']})" for d in differences
                             if d["host"] == request.node} or {f"{d['host']}: {d['component']}" for d in differences})
        raise StepFailed("differs from the fleet: " + "; ".join(components))


def _build(request: ReplaceRequest, console: Console, step: StepRecord) -> None:
    """All roles on the node, the cluster-wide files everywhere. A failure that comes from the node
    differing from the fleet (firmware not allowed to move) is reported as that difference."""
    extravars: dict[str, Any] = {"_replace_node": request.node}
    if request.allow_firmware_update:
        extravars["firmware_update_allowed"] = True
    try:
        step.run_record = str(step_playbook(request, console, "replace-node", "replace_node.yml", extravars))
    except StepFailed as failure:
        if "differs from the fleet" not in str(failure):
            raise
        try:
            _verify_versions(request, console, StepRecord("versions after a failed build", ""))
        except StepFailed as difference:
            if "differs from the fleet" in str(difference):
                raise StepFailed(str(difference)) from failure
        raise



def _check_cluster(request: ReplaceRequest, console: Console, step: StepRecord) -> None:
    """After a service machine's rebuild: Slurm answers and no GPU node is down or unreachable
    (drained nodes stay as they were: Slurm kept their state)."""
    states, record = _slurm_node_states(request, console)
    step.run_record = str(record)
    step.evidence["states"] = {node: sorted(seen) for node, seen in states.items()}
    gpu_nodes = request.inventory.group("gpu_nodes")
    missing = [node for node in gpu_nodes if node not in states]
    unsettled = [f"{node} {state}" for node in gpu_nodes for state in sorted(states.get(node, ()))
                 if not slurm.settled(state)]
    if missing or unsettled:
        raise StepFailed("GPU nodes not in service after the rebuild: "
                         + ", ".join(unsettled + [f"{node} unknown to Slurm" for node in missing]))


def trusted_host_keys(request: ReplaceRequest, address: str, port: int, console: Console) -> list[known_hosts.HostKey]:
    """The new machine's host keys the operator vouched for: the one --accept-new-host-key names,
    or all shown on a terminal answered yes; anything else is refused before a host is touched
    (InputError, exit 2). Trusting whatever answers at the address would let any machine there
    take the node's place, its secrets (munge key) included."""
    keys = known_hosts.scan(request.node, address, port)
    shown = "\n".join(f"  {key}" for key in keys)
    where = f"{request.node} ({address} port {port})"
    if request.accept_host_key:
        accepted = known_hosts.chosen(keys, request.accept_host_key)
        if not accepted:
            raise InputError([InputProblem("command line", "--accept-new-host-key",
                                           f"{request.accept_host_key} is not a key {where} presents; it presents:\n"
                                           f"{shown}\nnothing was changed")])
        console.print(f"{where}: host key {accepted[0]} accepted (--accept-new-host-key)", highlight=False)
        return accepted
    if request.ask is not None:
        answer = request.ask(f"{where} presents these host keys:\n{shown}\nCompare them with the machine's "
                             "console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub). Trust them? [yes/no] ")
        if answer.strip().lower() == "yes":
            return keys
    raise InputError([InputProblem("command line", "--accept-new-host-key",
                                   f"{where} presents new host keys:\n{shown}\ncheck one against the machine's "
                                   "console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and run again with "
                                   f"--accept-new-host-key {keys[0].fingerprint}; nothing was changed")])


def replace_node(request: ReplaceRequest, console: Console) -> int:
    """Run every step; 0 when the machine is back in service, 1 when a step failed (a GPU node is
    left drained)."""
    inventory, node = request.inventory, request.node
    check_host(inventory, node)
    gpu_node = node in inventory.group("gpu_nodes")
    address = str(inventory.hostvars[node].get("ansible_host", node))
    port = inventory.hostvars[node].get("ansible_port", 22)
    port = port if isinstance(port, int) else 22
    with inventory_lock(inventory.directory, "replace-node", covers_nested=True):
        try:
            trusted = trusted_host_keys(request, address, port, console)
        except known_hosts.KnownHostsError as error:
            console.print(f"[red]replace-node {node} refused[/]: {error}; nothing was changed", highlight=False)
            return EXIT_FAILED
        record = new_record_dir(request.runs_dir, "replace-node-steps")
        steps: list[StepRecord] = []
        document = {"command": "replace-node", "argv": request.argv, "inventory": inventory.name, "node": node,
                    "roles": host_roles(inventory, node), "address": address, "reason": request.reason,
                    "started": datetime.now(UTC).isoformat(), "steps": steps}

        def save() -> None:
            write_private(record / "replace-node.json", json.dumps(
                {**document, "steps": [asdict(s) for s in steps]}, indent=2) + "\n")

        def step(name: str, action: Callable[[StepRecord], None]) -> None:
            current = StepRecord(name, datetime.now(UTC).isoformat(timespec="seconds"))
            steps.append(current)
            save()
            console.rule(f"replace-node {node}: {name}")
            run_step(current, action, save, (StepFailed, known_hosts.KnownHostsError))

        def unreachable_at_verify() -> list[str]:
            """The GPU nodes the version check found unreachable: never the partner."""
            return next((s.evidence.get("unreachable", []) for s in steps if s.name == "verify versions"), [])

        def set_record(current: StepRecord, path: Path) -> None:
            current.run_record = str(path)

        def fingerprints(current: StepRecord) -> None:
            presented = {key.key for key in known_hosts.scan(node, address, port)}
            if not any(key.key in presented for key in trusted):
                raise known_hosts.KnownHostsError(f"{node} ({address}) no longer presents the accepted host key "
                                                  f"{trusted[0]}: another machine answers at its address")
            keys = [key for key in trusted if key.key in presented]
            known_hosts.record(known_hosts.known_hosts_file(inventory.hostvars[node]), node, address, keys, port)
            current.evidence["fingerprints"] = [str(key) for key in keys]

        hold = f"replace-node: {request.reason}"
        plan: list[tuple[str, Callable[[StepRecord], None]]] = [
            ("drain", lambda s: set_record(s, drain(request, console, hold, wait=True))),
            ("known hosts", fingerprints),
            ("build", lambda s: _build(request, console, s)),
            ("verify versions", lambda s: _verify_versions(request, console, s)),
            ("certify", lambda s: _certify(request, console, s, unreachable_at_verify())),
            ("resume", lambda s: _resume(request, console, s)),
        ] if gpu_node else [
            ("known hosts", fingerprints),
            ("build", lambda s: _build(request, console, s)),
            ("check the cluster", lambda s: _check_cluster(request, console, s)),
        ]
        try:
            for name, action in plan:
                step(name, action)
        except (StepFailed, known_hosts.KnownHostsError) as error:
            failed = steps[-1]
            document.update({"result": step_result(error), "failed_step": failed.name})
            outcome = f"record: {record}"
            if gpu_node:
                reason = " ".join(f"replace-node: {failed.name}: {failed.detail}".split())
                try:
                    drain(request, console, reason, wait=False)
                    _release(request, console)
                except StepFailed as error:
                    failed.detail += f" (and draining again failed: {error})"
                document["drain_reason"] = reason[:REASON_LIMIT]
                outcome = f"{node} stays drained ({reason[:REASON_LIMIT]}); {outcome}"
            document["finished"] = datetime.now(UTC).isoformat()
            save()
            console.print(f"[red]replace-node {node} {step_result(error)} at {failed.name}[/]: {failed.detail}",
                          highlight=False)
            console.print(outcome, highlight=False)
            return exit_code_for(error)
        document.update({"result": "in service", "finished": datetime.now(UTC).isoformat()})
        save()
        done = ("replaced, certified and back in service" if gpu_node
                else f"({', '.join(document['roles'])}) rebuilt, the cluster in service")
        console.print(f"[green]{node} {done}[/]; record: {record}", highlight=False)
        return EXIT_OK
