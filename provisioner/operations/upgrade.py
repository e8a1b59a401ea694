"""provision upgrade: roll new pins (driver, HCA firmware, RDMA stack) across the GPU nodes in
batches, rebooting them, without stopping the cluster.

For each batch: drain the nodes (their jobs run to their end), install the new pins and reboot
where a node needs it (upgrade_node.yml), build every phase on them (site.yml limited to the
batch), compare their versions with the pins, certify each with a healthy partner and resume
it. Never more than --max-unavailable GPU nodes are out of service (drained, down, rebooting,
not responding, or not answering over SSH) when a batch starts; the batch shrinks to fit. A GPU
node that does not answer over SSH is named and left alone, and is never a partner. The first
batch that fails stops the rollout: its nodes stay drained with the failed step as the reason,
the nodes after it are not touched. A new `provision upgrade` goes on where an interrupted or
failed one stopped: the nodes it left drained come first, nodes already at the pins and
certified since their last change are skipped. Each node's steps are recorded in the command's
run record, `upgrade.json`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from provisioner.ansible.ledger import node_history
from provisioner.ansible.lock import inventory_lock
from provisioner.ansible.playbooks import drain_reason
from provisioner.ansible.runner import EXIT_FAILED, EXIT_OK
from provisioner.errors import InputError, InputProblem
from provisioner.facts.fleet import table as fleet_table
from provisioner.inventory.model import Inventory
from provisioner.operations.lifecycle import (
    CommandRecord,
    FleetRead,
    StepFailed,
    StepRecord,
    certify_in_reservation,
    check_in_service,
    drain_nodes,
    exit_code_for,
    now,
    read_fleet,
    read_slurm,
    release_reservation,
    step_playbook,
    step_result,
    wait_for_idle,
)
from provisioner.parsers import slurm

REASON_PREFIX = "upgrade:"


@dataclass
class UpgradeRequest:
    inventory: Inventory
    runs_dir: Path
    batch: str = "1"
    max_unavailable: int = 1
    reason: str = "rolling upgrade"
    nodes: list[str] | None = None
    allow_firmware_update: bool = False
    steps: int = 200
    drain_wait_s: int = 3600
    partner_wait_s: int = 600
    argv: list[str] = field(default_factory=list)


def batch_size(text: str, node_count: int) -> int:
    """--batch: a number of nodes ("2") or a share of the GPU nodes ("10%", at least one node)."""
    value = text.strip()
    try:
        if value.endswith("%"):
            share = float(value[:-1])
            if not 0 < share <= 100:
                raise ValueError
            return max(1, int(node_count * share / 100))
        number = int(value)
        if number < 1:
            raise ValueError
        return number
    except ValueError:
        raise InputError([InputProblem("command line", "--batch", f"{text!r} is neither a number of nodes "
                                       "(at least 1) nor a share of them (1% to 100%)")]) from None


def check_request(request: UpgradeRequest) -> list[str]:
    """The GPU nodes the upgrade covers; bad options are an InputError naming the option."""
    gpu_nodes = request.inventory.group("gpu_nodes")
    problems = []
    unknown = [node for node in request.nodes or [] if node not in gpu_nodes]
    if unknown:
        problems.append(InputProblem("command line", "--nodes", f"not GPU nodes of inventory "
                                     f"{request.inventory.name}: {', '.join(unknown)}"))
    if request.max_unavailable < 1:
        problems.append(InputProblem("command line", "--max-unavailable", "must be at least 1"))
    if len(gpu_nodes) < 2:
        problems.append(InputProblem(str(request.inventory.hosts_file), "gpu_nodes", "a rolling upgrade certifies "
                                     "each node with a partner: the inventory needs two GPU nodes or more"))
    if not request.reason.strip():
        problems.append(InputProblem("command line", "--reason", "must not be empty"))
    if problems:
        raise InputError(problems)
    batch_size(request.batch, len(gpu_nodes))
    return [node for node in gpu_nodes if not request.nodes or node in request.nodes]



@dataclass
class Plan:
    todo: list[str]
    skipped: dict[str, str]


def unavailable(states: dict[str, set[str]], nodes: list[str], unreachable: Collection[str]) -> list[str]:
    """The nodes out of service in Slurm, and those that did not answer over SSH (Slurm may not
    have noticed yet): the nodes that count against --max-unavailable."""
    out = set(slurm.nodes_out_of_service(states, nodes)) | set(unreachable)
    return [node for node in nodes if node in out]


def plan_nodes(nodes: list[str], states: dict[str, set[str]], reasons: dict[str, str],
               differing: set[str], certified_since_change: Callable[[str], bool],
               unreachable: Collection[str] = ()) -> Plan:
    """Which nodes to upgrade, in order: those an earlier upgrade left drained first, then the
    rest in inventory order; skipped: nodes that did not answer over SSH, nodes out of service
    for another reason (left alone), and nodes already at the pins and certified since their
    last change."""
    ours = [node for node in nodes if reasons.get(node, "").startswith(REASON_PREFIX) and node not in unreachable]
    out = set(slurm.nodes_out_of_service(states, nodes))
    todo, skipped = list(ours), {}
    for node in nodes:
        if node in ours:
            continue
        if node in unreachable:
            skipped[node] = "unreachable over SSH when the upgrade read the fleet's versions: left alone"
            continue
        if node in out:
            state = ", ".join(sorted(states.get(node, set()))) or "unknown to Slurm"
            skipped[node] = f"out of service ({state}{'; ' + reasons[node] if reasons.get(node) else ''}): left alone"
        elif node not in differing and certified_since_change(node):
            skipped[node] = "already at the pins, certified since its last change"
        else:
            todo.append(node)
    return Plan(todo, skipped)


def next_batch(todo: list[str], out_now: list[str], size: int, max_unavailable: int) -> list[str]:
    """The next batch: the nodes still to do that are already out (an interrupted batch's), then
    fresh ones up to the batch size while the nodes out of service stay within max_unavailable."""
    resumed = [node for node in todo if node in out_now]
    room = max_unavailable - len(out_now)
    fresh = [node for node in todo if node not in out_now][:max(0, min(size - len(resumed), room))]
    return resumed + fresh


class _Rollout:
    """One `provision upgrade`: its record, its steps, its reads of the cluster."""

    def __init__(self, request: UpgradeRequest, console: Console, nodes: list[str]):
        self.request, self.console = request, console
        self.nodes = nodes
        self.unreachable: list[str] = []
        # What the batch's own steps last read, so that nothing reads it again before it can have
        # changed: the versions after the build (the partners are chosen by them) and Slurm's
        # states after the last resume (the next batch is planned from them).
        self.batch_fleet: FleetRead | None = None
        self.states_after_batch: dict[str, set[str]] = {}
        self.record = CommandRecord(request.runs_dir, "upgrade", {
            "argv": request.argv, "inventory": request.inventory.name, "reason": request.reason,
            "batch": request.batch, "max_unavailable": request.max_unavailable, "started": now(), "batches": [],
            "skipped": {}, "unreachable": [], "nodes": {}}, console)
        self.document = self.record.document

    def cluster(self) -> tuple[dict[str, set[str]], dict[str, str]]:
        read = read_slurm(self.request, self.console, "upgrade-states")
        return read.states, read.reasons

    def fleet(self) -> FleetRead:
        return read_fleet(self.request, self.console, "upgrade-versions")

    def step(self, nodes: list[str], name: str, action: Callable[[StepRecord], None]) -> None:
        self.record.step(nodes, name, action)

    # The steps.

    def drain(self, nodes: list[str], reason: str, wait: bool) -> Path:
        return drain_nodes(self.request, self.console, "upgrade-drain", nodes, reason, False,
                           self.request.drain_wait_s if wait else 0)

    def install_and_reboot(self, nodes: list[str], step: StepRecord) -> None:
        extravars: dict[str, Any] = {}
        if self.request.allow_firmware_update:
            extravars["firmware_update_allowed"] = True
        outcome = step_playbook(self.request, self.console, "upgrade-node", "upgrade_node.yml", extravars,
                                limit=",".join(nodes))
        step.run_record = str(outcome.record)
        done = (outcome.summary.get("recorded") or {}).get("provision_upgrade") or {}
        step.evidence["nodes"] = {node: done.get(node, {}) for node in nodes}
        for node in nodes:
            self.record.node(node)["changes"] = done.get(node, {}).get("changes", [])
            self.record.node(node)["rebooted_for"] = done.get(node, {}).get("reboot", [])

    def build(self, nodes: list[str], step: StepRecord) -> None:
        step.run_record = str(step_playbook(self.request, self.console, "upgrade-build", "site.yml",
                                            {"slurm_nodes_held_drained": nodes}, limit=",".join(nodes)).record)

    def verify_versions(self, nodes: list[str], step: StepRecord) -> None:
        fleet = self.batch_fleet = self.fleet()
        step.run_record = str(fleet.record)
        own = [row for row in fleet.differences if row["host"] in nodes]
        step.evidence.update({"nodes_compared": fleet.compared,
                              "not_yet_upgraded": sorted({row["host"] for row in fleet.differences} - set(nodes)),
                              "differences": own})
        missing = [node for node in nodes if node not in fleet.compared]
        if missing:
            raise StepFailed(f"versions could not be read on {', '.join(missing)}")
        if own:
            self.console.print(fleet_table(own), highlight=False)
            raise StepFailed("differs from the pins: " + "; ".join(
                f"{row['host']} {row['component']} {row['found']} (expected {row['expected']})" for row in own))

    def partner(self, node: str, batch: list[str], step: StepRecord) -> tuple[str, bool]:
        """An idle node outside the batch, one already at the pins when there is one; and
        whether its versions are exempt from the certification's check (not yet upgraded)."""
        others = [n for n in self.request.inventory.group("gpu_nodes") if n not in batch and n not in self.unreachable]
        idle, sinfo = wait_for_idle(self.request, self.console, "upgrade-states", node, others,
                                    self.request.partner_wait_s)
        assert self.batch_fleet is not None, "the batch's versions are read before its nodes are certified"
        differing = {row["host"] for row in self.batch_fleet.differences}
        chosen = ([n for n in idle if n not in differing] or idle)[0]
        step.evidence.update({"partner_states": sinfo, "partner_not_yet_upgraded": chosen in differing})
        return chosen, chosen in differing

    def certify(self, node: str, batch: list[str], step: StepRecord) -> None:
        partner, exempt = self.partner(node, batch, step)
        certify_in_reservation(self.request, self.console, step, "upgrade", node, partner, reservation_name(node),
                               self.request.steps, (partner,) if exempt else ())

    def release(self, node: str) -> Path:
        return release_reservation(self.request, self.console, "upgrade-release", reservation_name(node))

    def resume(self, node: str, step: StepRecord) -> None:
        step.run_record = str(self.release(node))
        self.states_after_batch = self.cluster()[0]
        check_in_service(node, self.states_after_batch, step)

    def run_batch(self, batch: list[str]) -> None:
        hold = f"{REASON_PREFIX} {self.request.reason}"
        self.step(batch, "drain", lambda s: setattr(s, "run_record", str(self.drain(batch, hold, wait=True))))
        self.step(batch, "install and reboot", lambda s: self.install_and_reboot(batch, s))
        self.step(batch, "build", lambda s: self.build(batch, s))
        self.step(batch, "verify versions", lambda s: self.verify_versions(batch, s))
        for node in batch:
            self.step([node], "certify", lambda s, node=node: self.certify(node, batch, s))
            self.step([node], "resume", lambda s, node=node: self.resume(node, s))
            self.record.node(node)["result"] = "upgraded"

    def fail_batch(self, batch: list[str]) -> str:
        """Leave the batch's nodes not yet resumed drained, the failed step as the reason."""
        left = [node for node in batch if self.record.node(node).get("result") != "upgraded"]
        failed = next(s for s in reversed(self.record.steps[left[0]]) if not s.ok) if left else None
        reason = drain_reason(f"{REASON_PREFIX} {failed.name}: {failed.detail}" if failed else REASON_PREFIX)
        try:
            self.drain(left, reason, wait=False)
            for node in left:
                self.release(node)
        except StepFailed as error:
            if failed:
                failed.detail += f" (and draining again failed: {error})"
        for node in left:
            self.record.node(node).update({"result": "failed", "drain_reason": reason})
        return reason


def reservation_name(node: str) -> str:
    return f"provision-upgrade-{node}"


def upgrade(request: UpgradeRequest, console: Console) -> int:
    """Roll the inventory's pins across its GPU nodes; 0 when every node is upgraded (or already
    was), 1 when a batch failed or no batch fits within --max-unavailable."""
    nodes = check_request(request)
    size = batch_size(request.batch, len(request.inventory.group("gpu_nodes")))
    with inventory_lock(request.inventory.directory, "upgrade", covers_nested=True):
        rollout = _Rollout(request, console, nodes)
        record = rollout.record
        try:
            states, reasons = rollout.cluster()
            fleet = rollout.fleet()
        except StepFailed as error:
            record.finish(step_result(error), detail=f"reading the cluster: {error}")
            console.print(f"[red]upgrade: the cluster could not be read[/]: {error}", highlight=False)
            return exit_code_for(error)
        differing = {row["host"] for row in fleet.differences}
        gpu_nodes = request.inventory.group("gpu_nodes")
        rollout.unreachable = rollout.document["unreachable"] = fleet.unreachable
        plan = plan_nodes(nodes, states, reasons, differing,
                          lambda node: node_history(request.runs_dir, node).certified_since_change,
                          rollout.unreachable)
        rollout.document["skipped"] = plan.skipped
        rollout.document["planned"] = plan.todo
        for node, why in plan.skipped.items():
            console.print(f"{node}: {why}", highlight=False)
        todo = list(plan.todo)
        while todo:
            out_now = unavailable(states, gpu_nodes, rollout.unreachable)
            batch = next_batch(todo, out_now, size, request.max_unavailable)
            if not batch:
                named = [f"{node} unreachable" if node in rollout.unreachable else node for node in out_now]
                detail = (f"{len(out_now)} GPU node(s) out of service ({', '.join(named)}): --max-unavailable "
                          f"{request.max_unavailable} leaves no room for another node")
                record.finish("stopped", detail=detail, remaining=todo)
                console.print(f"[red]upgrade stopped[/]: {detail}; record: {record.folder}", highlight=False)
                return EXIT_FAILED
            rollout.document["batches"].append(batch)
            try:
                rollout.run_batch(batch)
            except StepFailed as error:
                reason = rollout.fail_batch(batch)
                remaining = [node for node in todo if node not in batch]
                record.finish(step_result(error), failed_batch=batch, remaining=remaining)
                console.print(f"[red]upgrade {step_result(error)} on {', '.join(batch)}[/] ({reason}); they stay "
                              f"drained, {', '.join(remaining) or 'no node'} left as they were; record: "
                              f"{record.folder}", highlight=False)
                return exit_code_for(error)
            todo = [node for node in todo if node not in batch]
            states = rollout.states_after_batch
        record.finish("upgraded")
        upgraded = rollout.document["batches"]
        console.print(f"[green]upgrade done[/]: {sum(len(b) for b in upgraded)} node(s) upgraded in {len(upgraded)} "
                      f"batch(es), {len(plan.skipped)} skipped; record: {record.folder}", highlight=False)
        return EXIT_OK
