"""What a certification job printed, read back: the instruments' results, the ranks' refusals,
heartbeats and CPUs, Slurm's word on failed nodes, the ranks that hung first; and from all of
it a job's outcome for the schedule.

Plain standard library (Python 3.10 and newer): the driver runs this on the Slurm controller,
the CLI's criteria on the operator's machine.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from provisioner.certify.schedule import Job, JobOutcome
from provisioner.parsers.common import ParseError
from provisioner.parsers.fio import fio_report
from provisioner.parsers.nccl_tests import parse_nccl_tests

SWEEP_MARK, TRAIN_MARK = "PROVISION-SWEEP ", "PROVISION-TRAIN "
# A rank that refuses to run (the node has GPUs, the rank has none) says so on this line.
REFUSED_MARK = "PROVISION-REFUSED "
# Each rank's position, every few seconds, from a thread of its own: the driver tells a rank
# that stopped from one waiting for it.
HEARTBEAT_MARK = "PROVISION-HEARTBEAT "
# The CPUs a task may run on (the launcher, for nccl-tests' tasks; the torch ranks report theirs
# in their results).
CPUS_MARK = "PROVISION-CPUS "
# The launcher's first line on each node: the job reached the node.
START_MARK = "PROVISION-START "
# The storage instrument's result per phase (write, read): the wall time around fio and fio's JSON.
STORAGE_MARK = "PROVISION-STORAGE "


class Refused(ParseError):
    """Ranks refused to run (no GPU of their own on a GPU node); hosts names their nodes."""

    def __init__(self, refusals: list[dict[str, Any]]):
        self.hosts = sorted({r["host"] for r in refusals})
        first = refusals[0]
        super().__init__(f"{len(refusals)} rank(s) refused to run on the CPU, on {', '.join(self.hosts)}: "
                         f"{first['host']} rank {first['rank']}: {first['reason']}")


def marked_objects(stdout: str, mark: str, strict: bool = True) -> list[dict[str, Any]]:
    """Every JSON object printed after mark, in output order.

    Ranks of one node share the step's stdout: a line may hold the marks of several ranks run
    together (one rank's line cut into by another's), so each mark is decoded where it stands
    and whatever follows its object is left to the next mark. An undecodable mark is a
    ParseError, or skipped when not strict (a heartbeat cut short by a killed rank)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    start = stdout.find(mark)
    while start != -1:
        end = start + len(mark)
        try:
            value, end = decoder.raw_decode(stdout, start + len(mark))
        except json.JSONDecodeError as error:
            if strict:
                raise ParseError(f"unreadable {mark.strip()} line in the job's output: {error}") from error
        else:
            if isinstance(value, dict):
                found.append(value)
        start = stdout.find(mark, end)
    return found


def refusals(stdout: str) -> list[dict[str, Any]]:
    """The ranks' refusals in a job's output, in rank order."""
    return sorted(marked_objects(stdout, REFUSED_MARK), key=lambda r: r["rank"])


def _marked(stdout: str, mark: str) -> dict[str, Any]:
    if found := marked_objects(stdout, mark):
        return found[-1]
    raise ParseError(f"no {mark.strip()} line in the job's output")


def storage_facts(stdout: str) -> dict[str, Any]:
    """The node's checkpoint write and read: per phase the bytes fio moved, the wall time (fsync
    included: what a training waits for) and the bandwidth from both, fio's own beside it."""
    facts: dict[str, Any] = {}
    for phase in marked_objects(stdout, STORAGE_MARK):
        direction = phase.get("phase")
        if direction not in ("write", "read"):
            continue
        report = phase.get("fio")
        if not isinstance(report, dict):
            raise ParseError(f"no fio report for the {direction} in the job's output")
        fio = fio_report(report)
        if fio["errors"]:
            raise ParseError(f"fio {direction} failed in job(s) {', '.join(fio['errors'])}")
        moved = fio[direction]["io_bytes"]
        expected = int(phase["bytes_per_rank"]) * int(phase["ranks"])
        if moved < expected:
            raise ParseError(f"fio {direction} moved {moved} of {expected} bytes")
        seconds = float(phase["seconds"])
        facts[direction] = {"bytes": moved, "seconds": seconds, "gbps": moved / seconds / 1e9 if seconds > 0 else 0.0,
                            "fio_gbps": fio[direction]["bw_bytes"] / 1e9, "ranks": int(phase["ranks"]),
                            "direct": bool(phase.get("direct"))}
        facts["host"] = str(phase.get("host", ""))
    missing = [direction for direction in ("write", "read") if direction not in facts]
    if missing:
        raise ParseError(f"no {STORAGE_MARK.strip()} line for the {' and '.join(missing)} in the job's output")
    return facts


def read_output(instrument: str, stdout: str) -> dict[str, Any]:
    """The instrument's facts from its job's output; ParseError if it printed none, Refused
    where ranks refused to run without a GPU."""
    if found := refusals(stdout):
        raise Refused(found)
    if instrument == "nccl-tests":
        return parse_nccl_tests(stdout)
    if instrument == "storage":
        return storage_facts(stdout)
    return _marked(stdout, SWEEP_MARK if instrument == "sweep" else TRAIN_MARK)


def gradient_row(rows: list[dict[str, Any]], gradient_bytes: int) -> dict[str, Any]:
    """The row at the gradient size, else the largest measured (nccl-tests may reduce maxBytes)."""
    exact = [row for row in rows if row["size_bytes"] == gradient_bytes]
    return exact[0] if exact else max(rows, key=lambda row: row["size_bytes"])


def bucket_row(rows: list[dict[str, Any]], bucket_bytes: int) -> dict[str, Any]:
    """The smallest measured size at least the bucket size, else the largest measured."""
    above = [row for row in rows if row["size_bytes"] >= bucket_bytes]
    return min(above, key=lambda row: row["size_bytes"]) if above else max(rows, key=lambda row: row["size_bytes"])


def row_busbw(row: dict[str, Any], instrument: str) -> float:
    return row["out_of_place"]["busbw_gbps"] if instrument == "nccl-tests" else row["busbw_gbps"]


def busbw(facts: dict[str, Any], instrument: str, gradient_bytes: int) -> float:
    return row_busbw(gradient_row(facts["rows"], gradient_bytes), instrument)


def wrong_values(facts: dict[str, Any], instrument: str) -> int:
    if instrument == "nccl-tests":
        values = [row[place]["wrong"] for row in facts["rows"] for place in ("out_of_place", "in_place")]
        return sum(v for v in values if v) + int(facts.get("out_of_bounds") or 0)
    return sum(row["wrong"] or 0 for row in facts["rows"])


# srun's own lines about the step's tasks and nodes. Lines after the step was terminated (by
# --kill-on-bad-exit, a cancel, the driver) are consequences, not causes.
_TASK_LINE = re.compile(r"^srun: error: (?P<node>[^\s:]+): tasks? [\d,\-]+: (?P<what>.+?)\s*$", re.MULTILINE)
_NODE_LINES = (re.compile(r"srun: error: Node failure on (?P<node>[^\s:]+)"),
               re.compile(r"Task launch for \S+ failed on node (?P<node>[^\s:]+)"),
               re.compile(r"srun: error: (?P<node>[^\s:]+): .*\bnot responding\b"))
_TERMINATED = re.compile(r"Terminating (?:Step|Job)Id=|Force Terminated|\*\*\* (?:STEP|JOB) .* CANCELLED")


# NCCL's warnings carry the source file: transport/nvls.cc is NVLink SHARP's setup (multicast
# objects over NVSwitch, which the fabric manager provides).
_NVLS_WARNING = re.compile(r"^(?:(?P<host>[^\s:]+):\d+:\d+ \[\d+\] )?\S*nvls\.cc:\d+ NCCL WARN (?P<what>.*)$|"
                           r"^(?:(?P<host2>[^\s:]+):\d+:\d+ \[\d+\] )?\S* ?NCCL WARN (?P<what2>.*\bNVLS\b.*)$",
                           re.MULTILINE)


def nvls_failure(text: str) -> str | None:
    """'NVLS unavailable: fabric manager? (<host>: <warning>)' when NCCL warned while setting up
    NVLS, else None. nccl-tests' NCCL falls back to other algorithms; torch's fails the job."""
    match = _NVLS_WARNING.search(text)
    if match is None:
        return None
    host = match.group("host") or match.group("host2")
    what = (match.group("what") or match.group("what2") or "").strip()
    return f"NVLS unavailable: fabric manager? ({f'{host}: ' if host else ''}{what[:200]})"


def failed_nodes(stderr: str) -> tuple[list[str], str]:
    """The nodes Slurm reports failed before the step was ended (node failure, failed launch,
    not responding, tasks killed by a signal or out of memory), and the first such line.
    A task's non-zero exit status is the program's own failure, not the node's."""
    terminated = _TERMINATED.search(stderr)
    before = stderr[: terminated.start()] if terminated else stderr
    named: list[str] = []
    first = ""
    for pattern in _NODE_LINES:
        for match in pattern.finditer(before):
            named.append(match.group("node"))
            first = first or match.group(0)
    for match in _TASK_LINE.finditer(before):
        what = match.group("what")
        if what.startswith("Exited with exit code") or what == "Terminated":
            continue
        named.append(match.group("node"))
        first = first or match.group(0)
    return sorted(set(named)), first


@dataclass
class RankSeen:
    host: str
    position: int
    where: str
    last_seen: float


@dataclass
class Watch:
    """A job run's progress as its output arrives: the ranks' heartbeats, or for an instrument
    without them (nccl-tests) any new output. `last_progress` is when anything last moved."""

    nodes: list[str]
    started: float
    heartbeats: bool
    last_progress: float = 0.0
    ranks: dict[int, RankSeen] = field(default_factory=dict)
    started_hosts: set[str] = field(default_factory=set)
    _partial: str = ""

    def __post_init__(self) -> None:
        self.last_progress = self.last_progress or self.started

    def feed(self, text: str, now: float) -> None:
        text, _, self._partial = (self._partial + text).rpartition("\n")
        if not text:
            return
        if not self.heartbeats and text.strip():
            self.last_progress = now
        for start in marked_objects(text, START_MARK, strict=False):
            if start.get("host") not in self.started_hosts:
                self.started_hosts.add(str(start.get("host")))
                self.last_progress = now
        for beat in marked_objects(text, HEARTBEAT_MARK, strict=False):
            try:
                rank, position = int(beat["r"]), int(beat["p"])
            except (KeyError, TypeError, ValueError):
                continue
            seen = self.ranks.get(rank)
            if seen is None or position != seen.position:
                self.last_progress = now
                self.ranks[rank] = RankSeen(str(beat.get("h", "")), position, str(beat.get("w", "")), now)
            else:
                seen.last_seen = now

    def stalled_for(self, now: float) -> float:
        return now - self.last_progress

    def hung(self, heartbeat_s: float) -> tuple[list[str], str]:
        """The nodes whose ranks stopped first, or never reached where the others wait: silent well
        before the last rank was heard, else (where every rank still speaks) behind the furthest
        position; or never heard at all. Nothing where every node looks the same (the others
        cannot be told apart)."""
        if not self.heartbeats or not self.ranks:
            return [], "no rank reported its progress"
        top = max(seen.position for seen in self.ranks.values())
        latest = max(seen.last_seen for seen in self.ranks.values())
        behind = {rank for rank, seen in self.ranks.items() if seen.position < top}
        silent = {rank for rank, seen in self.ranks.items() if seen.last_seen < latest - 3 * heartbeat_s}
        heard = {seen.host for seen in self.ranks.values()}
        unheard = [node for node in self.nodes if node not in heard]
        # Ranks that fell silent are the ones stopped; the others go on printing where they wait,
        # and those of a sound node may sit a collective apart (gloo's ranks leave an all-reduce
        # one after the other), which is no sign. Behind counts only where no rank fell silent.
        culprits = silent or behind
        named = sorted({self.ranks[rank].host for rank in culprits} | set(unheard))
        if not named or set(named) >= set(self.nodes):
            waiting = next(iter(self.ranks.values())).where
            return [], f"every rank stopped together (at {waiting}): none is behind the others"
        parts = []
        for host in named:
            mine = sorted(rank for rank in culprits if self.ranks[rank].host == host)
            if not mine:
                parts.append(f"{host}: no rank reported")
                continue
            where = ", ".join(sorted({self.ranks[rank].where for rank in mine}))
            quiet = [rank for rank in mine if rank in silent]
            if quiet:
                gap = latest - max(self.ranks[rank].last_seen for rank in quiet)
                parts.append(f"{host}: ranks {_ranks_text(mine)} fell silent {gap:.0f} s before the others "
                             f"(last heard at {where})")
            else:
                parts.append(f"{host}: ranks {_ranks_text(mine)} stayed at {where}")
        others = [seen for rank, seen in self.ranks.items() if rank not in culprits and seen.host not in named]
        waiting = f"; the others wait at {others[0].where}" if others else ""
        return named, "; ".join(parts) + waiting


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def stragglers(facts: dict[str, Any], percent: float) -> list[dict[str, Any]]:
    """Ranks whose median compute time per step is more than `percent` above the fleet's
    median of those medians (the smoke training's per-rank summary)."""
    ranks = [r for r in facts.get("ranks", []) if r.get("compute_median_s")]
    if len(ranks) < 2:
        return []
    fleet = statistics.median(r["compute_median_s"] for r in ranks)
    limit = fleet * (1 + percent / 100)
    return [{"rank": r["rank"], "host": r["host"], "compute_median_s": r["compute_median_s"],
             "fleet_median_s": fleet, "above_percent": (r["compute_median_s"] / fleet - 1) * 100}
            for r in ranks if r["compute_median_s"] > limit]


def job_outcome(job: Job, runs: list[dict[str, Any]], gradient_bytes: int, straggler_percent: float) -> JobOutcome:
    """A job's outcome from its runs (rc, stdout, stderr, and the driver's hang verdict: hung,
    hung_named, hung_detail)."""
    values: list[float] = []
    for run in runs:
        if run.get("hung"):
            return JobOutcome(job, "hung", named=list(run.get("hung_named") or []),
                              reason=run.get("hung_detail") or "no progress")
        stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
        if found := refusals(stdout):
            refusal = Refused(found)
            return JobOutcome(job, "failed", named=refusal.hosts, reason=str(refusal))
        if run.get("rc") != 0:
            named, line = failed_nodes(stderr)
            if not named and run.get("hung_named"):
                named, line = list(run["hung_named"]), run.get("hung_detail", "")
            tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
            reason = nvls_failure(stdout + "\n" + stderr) or line
            return JobOutcome(job, "failed", named=named,
                              reason=reason or f"exit status {run.get('rc')}" + (f": {tail[-200:]}" if tail else ""))
        try:
            facts = read_output(job.instrument, stdout)
        except (ParseError, ValueError, KeyError) as error:
            return JobOutcome(job, "failed", reason=str(error))
        if job.instrument == "storage":
            return JobOutcome(job, "ok")
        if job.instrument == "train":
            violation = facts.get("violation")
            if violation:
                return JobOutcome(job, "failed", named=sorted(set(violation["hosts"])),
                                  reason=f"{violation['check']} at step {violation['step']}, ranks "
                                         f"{violation['ranks']}")
            slow = stragglers(facts, straggler_percent)
            return JobOutcome(job, "ok", stragglers=sorted({s["host"] for s in slow}),
                              reason="; ".join(f"rank {s['rank']} on {s['host']}: compute "
                                               f"{s['compute_median_s'] * 1000:.1f} ms per step, "
                                               f"{s['above_percent']:.0f}% above the median" for s in slow))
        try:
            wrong = wrong_values(facts, job.instrument)
            values.append(busbw(facts, job.instrument, gradient_bytes))
        except (KeyError, TypeError, ValueError) as error:
            return JobOutcome(job, "failed", reason=f"unreadable result: {error}")
        if wrong:
            return JobOutcome(job, "failed", reason=f"{wrong} wrong values")
    return JobOutcome(job, "ok", statistics.median(values) if values else None)
