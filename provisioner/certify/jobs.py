"""Slurm's view of the nodes to certify: which are free for the run."""

from __future__ import annotations

import re
from collections import defaultdict


def _hostnames(expression: str) -> set[str]:
    """Expand a Slurm host list (gpu[01-03,07],login1) into names."""
    names: set[str] = set()
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", expression):
        prefix, ranges = match.group(1), match.group(2)
        if not ranges:
            names.add(prefix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            for number in range(int(low), int(high or low) + 1):
                names.add(f"{prefix}{number:0{len(low)}d}")
    return names


def node_states(sinfo: str) -> dict[str, set[str]]:
    """Each node's states (lower case; one line per partition it is in) from
    `sinfo --Node --noheader --format "%N %T"`."""
    states: dict[str, set[str]] = defaultdict(set)
    for line in sinfo.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            states[fields[0]].add(fields[1].lower())
    return dict(states)


def busy_nodes(sinfo: str, nodes: list[str], reservation: str, reservation_info: str) -> list[str]:
    """Why each node cannot be certified now: not idle (or, with a reservation, not in it).

    sinfo: `sinfo --Node --noheader --format "%N %T"`; reservation_info: `scontrol show
    reservation NAME`. Idle nodes are free; with a reservation that holds a node, its reserved
    state counts as free too.
    """
    states = node_states(sinfo)
    reserved: set[str] = set()
    if reservation:
        found = re.search(r"\bNodes=(\S+)", reservation_info)
        if not found:
            return [f"reservation {reservation} not found"]
        reserved = _hostnames(found.group(1))
    problems = []
    for node in nodes:
        seen = states.get(node)
        if not seen:
            problems.append(f"{node}: not known to Slurm")
            continue
        state = sorted(seen)[0]
        free = {"idle"} | ({"reserved", "resv", "planned", "maint"} if node in reserved else set())
        if reservation and node not in reserved:
            problems.append(f"{node}: not in reservation {reservation}")
        elif state.rstrip("*~#!%$@^-") not in free or state.endswith("*"):
            problems.append(f"{node}: {state} (needs idle{' or reserved' if reservation else ''})")
    return problems
