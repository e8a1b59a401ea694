"""provision drain and provision resume: one GPU node out of service and back.

A resume is refused unless the node passed a certification since its last change (an apply,
a replace-node, an upgrade touched it), or the operator forces it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from provisioner.ansible import playbooks
from provisioner.ansible.ledger import node_history
from provisioner.inventory.model import Inventory
from provisioner.operations.lifecycle import check_gpu_node

DRAIN_WAIT_S = 3600


@dataclass
class NodeRequest:
    inventory: Inventory
    node: str
    runs_dir: Path
    force: bool = False
    argv: list[str] = field(default_factory=list)


def drain(request: NodeRequest, console: Console, reason: str, wait: bool) -> int:
    """Drain the node with the reason (its jobs requeued when forced; waited for up to an hour with wait)."""
    check_gpu_node(request.inventory, request.node)
    return playbooks.drain(request, console, "drain", {request.node: reason}, request.force,
                           DRAIN_WAIT_S if wait else 0).exit_code


class NotCertified(Exception):
    """A resume refused: the node has not passed certification since its last change."""


def resume(request: NodeRequest, console: Console) -> int:
    """Resume the node; NotCertified unless it passed certification since its last change (or forced)."""
    check_gpu_node(request.inventory, request.node)
    history = node_history(request.runs_dir, request.node)
    if not history.certified_since_change and not request.force:
        raise NotCertified(f"{request.node} has not passed certification since its last change "
                           f"(last change: {history.last_change or 'none recorded'}, last passed certification: "
                           f"{history.last_certified or 'none'}); run provision certify --nodes {request.node},... "
                           "or resume with --force")
    return playbooks.resume(request, console, "resume", [request.node]).exit_code
