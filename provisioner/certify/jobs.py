"""The certification's Slurm jobs: which to run, their srun command lines, their outputs read back."""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from provisioner.parsers.common import ParseError
from provisioner.parsers.nccl_tests import parse_nccl_tests

LAUNCHER = "/usr/local/sbin/provision-certify-launch"
SWEEP_MARK, TRAIN_MARK = "PROVISION-SWEEP ", "PROVISION-TRAIN "
# A rank that refuses to run (the node has GPUs, the rank has none) says so on this line.
REFUSED_MARK = "PROVISION-REFUSED "


class Refused(ParseError):
    """Ranks refused to run (no GPU of their own on a GPU node); hosts names their nodes."""

    def __init__(self, refusals: list[dict[str, Any]]):
        self.hosts = sorted({r["host"] for r in refusals})
        first = refusals[0]
        super().__init__(f"{len(refusals)} rank(s) refused to run on the CPU, on {', '.join(self.hosts)}: "
                         f"{first['host']} rank {first['rank']}: {first['reason']}")


def marked_objects(stdout: str, mark: str) -> list[dict[str, Any]]:
    """Every JSON object printed after mark, in output order.

    Ranks of one node share the step's stdout: a line may hold the marks of several ranks run
    together (one rank's line cut into by another's), so each mark is decoded where it stands
    and whatever follows its object is left to the next mark."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    start = stdout.find(mark)
    while start != -1:
        try:
            value, end = decoder.raw_decode(stdout, start + len(mark))
        except json.JSONDecodeError as error:
            raise ParseError(f"unreadable {mark.strip()} line in the job's output: {error}") from error
        if isinstance(value, dict):
            found.append(value)
        start = stdout.find(mark, end)
    return found


def refusals(stdout: str) -> list[dict[str, Any]]:
    """The ranks' refusals in a job's output, in rank order."""
    return sorted(marked_objects(stdout, REFUSED_MARK), key=lambda r: r["rank"])


@dataclass(frozen=True)
class Job:
    """One srun step: an instrument on some nodes."""

    name: str
    instrument: str  # nccl-tests | sweep | train
    scope: str  # node | all | pair | training
    nodes: list[str]
    repeat: int = 1
    args: list[str] = field(default_factory=list)


def scopes(nodes: list[str], per_node: bool = True) -> list[tuple[str, list[str]]]:
    """Each node alone (unless it has one rank: nothing to communicate), then all nodes, then
    every pair (pairs only localise with three or more)."""
    result = [("node", [node]) for node in nodes] if per_node else []
    if len(nodes) > 1:
        result.append(("all", list(nodes)))
    if len(nodes) > 2:
        result.extend(("pair", list(pair)) for pair in itertools.combinations(nodes, 2))
    return result


def plan(nodes: list[str], repeats: int, steps: int, preset: str, inject_grad_fault: int | None = None,
         parts: tuple[str, ...] = ("communication", "training"), ranks_per_node: int = 8,
         bucket_mb: float = 100.0) -> list[Job]:
    """Every job of a certification, in the order they run: communication first, then training.

    Repeats run in rounds (every scope once, then every scope again): a node is compared with
    the others by medians whose runs were spread over the same period, so a passing burst of
    load on the machines cannot land on all of one node's runs."""
    jobs: list[Job] = []
    if "communication" in parts:
        labelled = [(scope, members, "+".join(members) if scope != "all" else "all")
                    for scope, members in scopes(nodes, per_node=ranks_per_node > 1)]
        for r in range(1, repeats + 1):
            jobs.extend(Job(f"nccl-tests {scope} {label} #{r}", "nccl-tests", scope, members, r)
                        for scope, members, label in labelled)
            if r == 1:
                jobs.extend(Job(f"sweep {scope} {label}", "sweep", scope, members)
                            for scope, members, label in labelled)
    if "training" in parts:
        args = ["--preset", preset, "--steps", str(steps), "--bucket-mb", f"{bucket_mb:g}"]
        if inject_grad_fault is not None:
            args += ["--inject-grad-fault", str(inject_grad_fault)]
        jobs.append(Job("smoke training", "train", "training", list(nodes), 1, args))
    return jobs


def srun_argv(job: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """srun command line of one job; settings: procs_per_node, gpus_per_node, mpi, partition,
    reservation, time_limit.

    Each job takes its nodes whole: every GPU (with ConstrainDevices=yes a step sees only the
    GPUs it asked for, and none without --gpus-per-node) and all their memory."""
    per_node = int(settings["procs_per_node"]) if job["instrument"] == "nccl-tests" else 1
    argv = ["srun", f"--job-name=certify-{job['instrument']}", f"--nodes={len(job['nodes'])}",
            f"--nodelist={','.join(job['nodes'])}", f"--ntasks-per-node={per_node}", "--exclusive", "--mem=0",
            "--kill-on-bad-exit=1", f"--time={settings['time_limit']}"]
    if int(settings.get("gpus_per_node") or 0) > 0:
        argv.append(f"--gpus-per-node={int(settings['gpus_per_node'])}")
    if job["instrument"] == "nccl-tests" and settings.get("mpi"):
        argv.append(f"--mpi={settings['mpi']}")
    if settings.get("partition"):
        argv.append(f"--partition={settings['partition']}")
    if settings.get("reservation"):
        argv.append(f"--reservation={settings['reservation']}")
    return [*argv, LAUNCHER, job["instrument"], *job.get("args", [])]


def _marked(stdout: str, mark: str) -> dict[str, Any]:
    if found := marked_objects(stdout, mark):
        return found[-1]
    raise ParseError(f"no {mark.strip()} line in the job's output")


def read_output(instrument: str, stdout: str) -> dict[str, Any]:
    """The instrument's facts from its job's output; ParseError if it printed none, Refused
    where ranks refused to run without a GPU."""
    if found := refusals(stdout):
        raise Refused(found)
    if instrument == "nccl-tests":
        return parse_nccl_tests(stdout)
    return _marked(stdout, SWEEP_MARK if instrument == "sweep" else TRAIN_MARK)


def as_dicts(jobs: list[Job]) -> list[dict[str, Any]]:
    return [asdict(job) for job in jobs]


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


def results(loop_results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Ansible loop's results reduced to what the criteria read."""
    keep = ("name", "instrument", "scope", "nodes", "repeat", "args")
    return [{**{k: r["item"][k] for k in keep}, "rc": r.get("rc", -1), "stdout": r.get("stdout", ""),
             "stderr": r.get("stderr", r.get("msg", "")), "start": r.get("start"), "end": r.get("end")}
            for r in loop_results]
