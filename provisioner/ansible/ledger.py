"""What the run records say about a node: its last change, its last passed certification."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CHANGING_COMMANDS = ("apply", "replace-node", "upgrade-node", "upgrade-build")


@dataclass(frozen=True)
class NodeHistory:
    last_change: str | None  # run record name (sorts by time)
    last_certified: str | None

    @property
    def certified_since_change(self) -> bool:
        return self.last_certified is not None and (self.last_change is None or self.last_certified > self.last_change)


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def node_history(runs_dir: Path, node: str) -> NodeHistory:
    """Scan run records: an apply (or replace-node build) that changed the node, a certification it passed."""
    last_change = last_certified = None
    for record in sorted(p for p in runs_dir.glob("*") if p.is_dir()) if runs_dir.is_dir() else []:
        summary = _json(record / "summary.json") or {}
        host = (summary.get("hosts") or {}).get(node) or {}
        if summary.get("command") in CHANGING_COMMANDS and not summary.get("check") and host.get("changed", 0) > 0:
            last_change = record.name
        certification = _json(record / "certification.json")
        if certification and not certification.get("fault_injected"):
            verdict = (certification.get("node_verdicts") or {}).get(node) or {}
            if verdict.get("certified"):
                last_certified = record.name
    return NodeHistory(last_change, last_certified)
