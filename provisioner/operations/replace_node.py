"""provision replace-node: rebuild one machine of the cluster, step by step.

A GPU node is drained, rebuilt, compared with the fleet, certified and resumed; a failed step
leaves it drained with the step as the reason. The controller, a monitoring host or a login
node is rebuilt (known hosts, every phase it has, the cluster-wide files everywhere) and the
cluster checked: every GPU node still in service. Each step is recorded (name, start,
duration, outcome, evidence, the run record of its playbook) in the command's own run record,
`replace-node.json`; a failed step exits 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from provisioner.ansible import known_hosts
from provisioner.ansible.lock import inventory_lock
from provisioner.ansible.playbooks import drain_reason
from provisioner.ansible.runner import EXIT_FAILED, EXIT_OK
from provisioner.errors import InputError, InputProblem
from provisioner.facts.fleet import table as fleet_table
from provisioner.inventory.model import Inventory
from provisioner.operations.lifecycle import (
    CommandRecord,
    StepFailed,
    StepRecord,
    certify_in_reservation,
    check_host,
    check_in_service,
    drain_nodes,
    exit_code_for,
    fleet_differences,
    host_roles,
    now,
    read_fleet,
    read_slurm,
    release_reservation,
    step_playbook,
    step_result,
    wait_for_idle,
)
from provisioner.parsers import slurm


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


def drain(request: ReplaceRequest, console: Console, reason: str, wait: bool) -> Path:
    return drain_nodes(request, console, "drain", [request.node], reason, request.force,
                       request.drain_wait_s if wait else 0)


def _reservation(request: ReplaceRequest) -> str:
    return f"provision-replace-{request.node}"


def _release(request: ReplaceRequest, console: Console) -> Path:
    return release_reservation(request, console, "replace-node-release", _reservation(request))


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


def _resume(request: ReplaceRequest, console: Console, step: StepRecord) -> None:
    step.run_record = str(_release(request, console))
    check_in_service(request.node, read_slurm(request, console, "replace-node-states").states, step)


def _differs(request: ReplaceRequest, differences: list[dict[str, str]]) -> StepFailed:
    """The step's failure: the node's own differences (or, where only others differ, theirs)."""
    components = sorted({f"{d['component']} {d['found']} (expected {d['expected']})" for d in differences
                         if d["host"] == request.node} or {f"{d['host']}: {d['component']}" for d in differences})
    return StepFailed("differs from the fleet: " + "; ".join(components))


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
        raise _differs(request, differences)


def _build(request: ReplaceRequest, console: Console, step: StepRecord) -> None:
    """All roles on the node, the cluster-wide files everywhere. A build that failed because the
    node differs from the fleet (firmware not allowed to move; the firmware role hands the
    differences back) is reported as that difference."""
    extravars: dict[str, Any] = {"_replace_node": request.node}
    if request.allow_firmware_update:
        extravars["firmware_update_allowed"] = True
    try:
        step.run_record = str(step_playbook(request, console, "replace-node", "replace_node.yml", extravars).record)
    except StepFailed as failure:
        differences = fleet_differences(failure.recorded, [request.node])
        if differences:
            step.evidence["differences"] = differences
            console.print(fleet_table(differences), highlight=False)
            raise _differs(request, differences) from failure
        raise


def _check_cluster(request: ReplaceRequest, console: Console, step: StepRecord) -> None:
    """After a service machine's rebuild: Slurm answers and no GPU node is down or unreachable
    (drained nodes stay as they were: Slurm kept their state)."""
    read = read_slurm(request, console, "replace-node-states")
    step.run_record = str(read.record)
    step.evidence["states"] = {node: sorted(seen) for node, seen in read.states.items()}
    gpu_nodes = request.inventory.group("gpu_nodes")
    missing = [node for node in gpu_nodes if node not in read.states]
    unsettled = [f"{node} {state}" for node in gpu_nodes for state in sorted(read.states.get(node, ()))
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
        record = CommandRecord(request.runs_dir, "replace-node", {
            "argv": request.argv, "inventory": inventory.name, "node": node, "roles": host_roles(inventory, node),
            "address": address, "reason": request.reason, "started": now()}, console, one_node=node)

        def unreachable_at_verify() -> list[str]:
            """The GPU nodes the version check found unreachable: never the partner."""
            return next((s.evidence.get("unreachable", []) for s in record.steps.get(node, [])
                         if s.name == "verify versions"), [])

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
                record.step([node], name, action, (StepFailed, known_hosts.KnownHostsError))
        except (StepFailed, known_hosts.KnownHostsError) as error:
            failed = record.steps[node][-1]
            outcome = f"record: {record.folder}"
            fields: dict[str, Any] = {"failed_step": failed.name}
            if gpu_node:
                reason = drain_reason(f"replace-node: {failed.name}: {failed.detail}")
                try:
                    drain(request, console, reason, wait=False)
                    _release(request, console)
                except StepFailed as again:
                    failed.detail += f" (and draining again failed: {again})"
                fields["drain_reason"] = reason
                outcome = f"{node} stays drained ({reason}); {outcome}"
            record.finish(step_result(error), **fields)
            console.print(f"[red]replace-node {node} {step_result(error)} at {failed.name}[/]: {failed.detail}",
                          highlight=False)
            console.print(outcome, highlight=False)
            return exit_code_for(error)
        record.finish("in service")
        done = ("replaced, certified and back in service" if gpu_node
                else f"({', '.join(record.document['roles'])}) rebuilt, the cluster in service")
        console.print(f"[green]{node} {done}[/]; record: {record.folder}", highlight=False)
        return EXIT_OK
