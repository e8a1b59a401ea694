"""Slurm's node states as `sinfo --Node --noheader` prints them, and what they mean.

One parser (lines of `|`-separated fields, as `--format '%N|%T|...'` prints them; the last field
keeps any `|` of its own, as a reason may), one flag rule (the suffixes `sinfo %T` adds to a
state), and named predicates: settled, out of service, in service, free for a job. Standard
library only: the certification driver runs it on the controller.
"""

from __future__ import annotations

import re

# Suffixes sinfo appends to a state: * not responding, ~ powered off, # powering up or being
# configured, ! pending power down, % powering down, $ in a maintenance reservation,
# @ pending reboot, ^ reboot issued, - planned for a higher-priority job, + more than one state.
FLAGS = "*~#!%$@^-+"
NOT_RESPONDING = "*"
IN_MAINTENANCE_RESERVATION = "$"
# States Slurm holds a node in on purpose (running jobs or not, drained or not): not down,
# failing or missing.
SETTLED = ("idle", "mixed", "allocated", "completing", "drained", "draining", "reserved", "planned")
# States (their beginnings) of a node Slurm does not schedule on.
OUT_OF_SERVICE = ("drain", "down", "fail", "reboot", "power", "unknown", "no_respond", "future")
# States of a node held for maintenance: not yet back in service after a resume.
MAINTENANCE = ("maint", "resv")
# States a reservation's own jobs may start on, for a node inside that reservation.
RESERVED = ("reserved", "resv", "planned", "maint")


def rows(text: str, columns: int) -> list[list[str]]:
    """The lines of `sinfo --noheader --format` with `columns` `|`-separated fields, stripped;
    lines with fewer fields or no node name are left out."""
    found = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split("|", columns - 1)]
        if len(fields) == columns and fields[0]:
            found.append(fields)
    return found


def node_states(text: str) -> dict[str, set[str]]:
    """Each node's states (lower case; a line per partition it is in) from `--format '%N|%T'`."""
    states: dict[str, set[str]] = {}
    for node, state in rows(text, 2):
        states.setdefault(node, set()).add(state.lower())
    return states


def node_details(text: str) -> dict[str, dict[str, str]]:
    """`--format '%N|%T|%G|%E'` as node -> {state, gres, reason}; a node in several partitions
    is listed once per partition, with the same fields."""
    return {node: {"state": state, "gres": gres, "reason": reason} for node, state, gres, reason in rows(text, 4)}


def node_reasons(text: str) -> dict[str, str]:
    """Each node's reason from `--format '%N|%E'` ("none" becomes "")."""
    return {node: "" if reason == "none" else reason for node, reason in rows(text, 2)}


def node_cpus(text: str) -> dict[str, int]:
    """CPUs per node from `--format '%N|%c'`."""
    return {node: int(cpus) for node, cpus in rows(text, 2) if cpus.isdigit()}


def base_state(state: str) -> str:
    """The state without its flags: "idle*" -> "idle"."""
    return state.lower().rstrip(FLAGS)


def flags(state: str) -> str:
    """The state's flags: "idle*" -> "*"."""
    return state[len(base_state(state)):]


def not_responding(state: str) -> bool:
    return NOT_RESPONDING in flags(state)


def settled(state: str) -> bool:
    """A state Slurm holds on purpose ("idle", "drained", ...), the node responding."""
    return base_state(state) in SETTLED and not not_responding(state)


def out_of_service(state: str) -> bool:
    """A state Slurm does not schedule on: drained or draining, down, failing, rebooting, powered
    off, unknown, or not responding."""
    return not_responding(state) or base_state(state).startswith(OUT_OF_SERVICE)


def nodes_out_of_service(states: dict[str, set[str]], nodes: list[str]) -> list[str]:
    """The nodes (in their order) out of service in any of their states, or unknown to Slurm."""
    return [node for node in nodes if not states.get(node) or any(out_of_service(s) for s in states[node])]


def unsettled_nodes(text: str, nodes: list[str]) -> list[str]:
    """The nodes that `--format '%N|%T|%G|%E'` does not list yet, or lists in a state not settled."""
    details = node_details(text)
    return [node for node in nodes if node not in details or not settled(details[node]["state"])]


def in_service(states: set[str]) -> bool:
    """After a resume: the node is known and neither out of service nor held for maintenance."""
    return bool(states) and not any(out_of_service(state) or base_state(state).startswith(MAINTENANCE)
                                    or IN_MAINTENANCE_RESERVATION in flags(state) for state in states)


def free_for_job(state: str, in_reservation: bool = False) -> bool:
    """Whether a job can have the node now: idle (or, inside its reservation, reserved), responding."""
    free = ("idle", *RESERVED) if in_reservation else ("idle",)
    return base_state(state) in free and not not_responding(state)


def hostnames(expression: str) -> set[str]:
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
