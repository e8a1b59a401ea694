"""What an operator reads first of a certification: the verdict, the failing nodes with their
evidence and the commands that take them out, hung or straggling ranks, counts, duration."""

from __future__ import annotations

import shlex
from typing import Any

from rich.console import Console

from provisioner.ansible.playbooks import drain_reason


def figure(value: Any, unit: str) -> str:
    """A measured value or threshold with its unit; an empty string where there is none."""
    if value is None or value == "":
        return ""
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


def evidence(check: dict[str, Any]) -> str:
    """A failed check in words: what was measured against what, and the detail behind it."""
    measured, threshold = figure(check["measured"], check["unit"]), figure(check["threshold"], check["unit"])
    parts = []
    if measured:
        parts.append(f"measured {measured}" + (f" against {threshold}" if threshold else ""))
    if check.get("detail"):
        parts.append(check["detail"])
    return "; ".join(parts)


def _actions(node: str, inventory: str, failed: list[str]) -> list[str]:
    reason = drain_reason("certify: " + ", ".join(failed))
    return [f"provision drain {node} -i {shlex.quote(inventory)} --reason {shlex.quote(reason)}",
            f"provision replace-node {node} -i {shlex.quote(inventory)}   # once repaired or replaced"]


def summarise(document: dict[str, Any]) -> dict[str, Any]:
    """The summary of a certification document (certification.json)."""
    checks = {check["id"]: check for check in document["checks"]}
    failing = []
    for node, verdict in document["node_verdicts"].items():
        if verdict["certified"]:
            continue
        failed = [checks[name] for name in verdict["failed_checks"] if name in checks]
        failing.append({"node": node, "checks": [{"id": c["id"], "name": c["name"], "evidence": evidence(c)}
                                                 for c in failed],
                        "actions": _actions(node, document.get("inventory", ""), verdict["failed_checks"])})
    # A failure that blames no node (a slow pair) goes with the failing node among its nodes, whom
    # the localisation named; only the ones no failing node explains stand alone.
    unblamed = []
    by_node = {failure["node"]: failure for failure in failing}
    for check in document["checks"]:
        if check["passed"] or check["blamed"]:
            continue
        entry = {"id": check["id"], "name": check["name"], "evidence": evidence(check)}
        owner = next((node for node in check["nodes"] if node in by_node), None)
        if owner is not None:
            by_node[owner]["checks"].append(entry)
        else:
            unblamed.append(entry)
    ranks = []
    for check in document["checks"]:
        if not check["passed"] and (check["id"].endswith(".hang") or check["id"].endswith(".straggler")):
            ranks.append(f"{check['name']}: {check['detail'] or ', '.join(check['blamed'])}")
    schedule = document.get("schedule") or {}
    nodes = document["nodes"]
    return {
        "verdict": "INTERRUPTED" if document.get("interrupted") else (
            "CERTIFIED" if document["certified"] else "NOT CERTIFIED"),
        "cluster": document["cluster"], "nodes": len(nodes), "certified_nodes": len(nodes) - len(failing),
        "failed_nodes": failing, "unblamed_failures": unblamed, "ranks": ranks,
        "duration_s": document["duration_s"], "rounds": len(document.get("rounds") or []),
        "base_rounds": schedule.get("base_rounds", 0), "localise_rounds": schedule.get("localise_rounds", 0),
        "checks": len(document["checks"]), "failed_checks": sum(not c["passed"] for c in document["checks"]),
    }


def print_summary(console: Console, summary: dict[str, Any], report: str) -> None:
    """The summary and the failures only; the whole table is --verbose's and the report's."""
    colour = {"CERTIFIED": "green", "NOT CERTIFIED": "red"}.get(summary["verdict"], "yellow")
    console.print(f"[bold {colour}]{summary['verdict']}[/]: {summary['cluster']}, {summary['certified_nodes']} of "
                  f"{summary['nodes']} nodes certified, {summary['failed_checks']} of {summary['checks']} checks "
                  f"failed; {summary['rounds']} rounds ({summary['base_rounds']} of the schedule, "
                  f"{summary['localise_rounds']} to localise) in {summary['duration_s'] / 60:.1f} min",
                  highlight=False, soft_wrap=True)
    for failure in summary["failed_nodes"]:
        console.print(f"[red]{failure['node']}[/] failed:", highlight=False)
        for check in failure["checks"]:
            console.print(f"  - {check['name']}: {check['evidence']}", highlight=False, soft_wrap=True)
        for line in failure["actions"]:
            console.print(f"    {line}", highlight=False, soft_wrap=True, markup=False)
    for check in summary["unblamed_failures"]:
        console.print(f"[red]FAIL[/] {check['name']} (no node blamed): {check['evidence']}", highlight=False,
                      soft_wrap=True)
    for line in summary["ranks"]:
        console.print(f"[yellow]ranks[/] {line}", highlight=False, soft_wrap=True)
    console.print(f"report: {report} (every check: --verbose)", highlight=False, soft_wrap=True)
