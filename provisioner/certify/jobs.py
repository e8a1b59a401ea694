"""Slurm's view of the nodes to certify: which are free for the run."""

from __future__ import annotations

import re

from provisioner.parsers import slurm


def busy_nodes(sinfo: str, nodes: list[str], reservation: str, reservation_info: str) -> list[str]:
    """Why each node cannot be certified now: not idle (or, with a reservation, not in it).

    sinfo: `sinfo --Node --noheader --format '%N|%T'`; reservation_info: `scontrol show
    reservation NAME`. Idle nodes are free; with a reservation that holds a node, its reserved
    state counts as free too.
    """
    states = slurm.node_states(sinfo)
    reserved: set[str] = set()
    if reservation:
        found = re.search(r"\bNodes=(\S+)", reservation_info)
        if not found:
            return [f"reservation {reservation} not found"]
        reserved = slurm.hostnames(found.group(1))
    problems = []
    for node in nodes:
        seen = states.get(node)
        if not seen:
            problems.append(f"{node}: not known to Slurm")
            continue
        state = sorted(seen)[0]
        if reservation and node not in reserved:
            problems.append(f"{node}: not in reservation {reservation}")
        elif not slurm.free_for_job(state, in_reservation=node in reserved):
            problems.append(f"{node}: {state} (needs idle{' or reserved' if reservation else ''})")
    return problems
