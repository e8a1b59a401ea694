"""The certification's schedule: rounds of Slurm jobs on disjoint nodes, and the rounds that
localise a failure.

A healthy fleet runs a fixed number of base rounds, whatever its size: every node alone
(nccl-tests, then the torch sweep), two or three pairings of disjoint pairs (nccl-tests; every
node meets at least two partners), all nodes together (nccl-tests, then the sweep), the
smoke training, and every node writing and reading its part of a checkpoint at once
(storage). The jobs of a round run at the same time, so a round takes about as long as one job.
When something fails or lags, localisation rounds name the culprits:
- a node alone names itself;
- pairs: every node of a bad pair is paired with a node already known good (all at once, as
  far as there are good partners); a node that is bad again is named; a bad pair whose nodes
  are both sound with others names the link between them;
- all nodes, or a training that no rank named: the failing set is halved, both halves run at
  once and each bad half is halved again (log2 of the fleet rounds); the last two or three
  nodes run with known-good partners;
- a training whose hung or failed ranks named their nodes runs again without them, so that
  the others can be certified.
Nodes named in one round are left out of the rounds after it.

Plain standard library (Python 3.10 and newer): the driver runs this on the Slurm controller.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field
from typing import Any

# What one run of each instrument takes, in seconds, when no measured figure is at hand.
DEFAULT_DURATIONS_S = {"nccl-tests": 30.0, "sweep": 45.0, "train": 300.0, "storage": 120.0}
BASE, LOCALISE = "base", "localise"
RESUME_ROUND = "smoke training resumed from its checkpoint"


@dataclass
class Job:
    """One instrument on some nodes, run `repeats` times in a row."""

    instrument: str  # nccl-tests | sweep | train | storage
    scope: str  # node | pair | all | training | resume | half | locate
    nodes: list[str]
    repeats: int = 1
    args: list[str] = field(default_factory=list)
    purpose: str = ""

    @property
    def label(self) -> str:
        return "all" if self.scope == "all" else "+".join(self.nodes)

    @property
    def name(self) -> str:
        return f"{self.instrument} {self.scope} {self.label}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name}


@dataclass
class Round:
    name: str
    kind: str  # base | localise
    jobs: list[Job]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "jobs": [job.as_dict() for job in self.jobs]}


@dataclass
class JobOutcome:
    """What a job showed, as far as the schedule needs it.

    status: ok | failed | hung. busbw_gbps: the median of the repeats at the gradient size
    (communication jobs that ran). named: nodes the job blamed itself (ranks that hung first,
    a node Slurm reported failed, ranks that refused or whose gradients differ). stragglers:
    nodes whose ranks computed slowly in a job that otherwise went well."""

    job: Job
    status: str
    busbw_gbps: float | None = None
    named: list[str] = field(default_factory=list)
    reason: str = ""
    stragglers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Limits:
    """A communication job is bad below the floor of its scope, or more than variance_percent
    below the median of the jobs it is compared with."""

    intra_node_gbps: float
    inter_node_gbps: float
    variance_percent: float = 5.0

    def floor(self, scope: str) -> float:
        return self.intra_node_gbps if scope == "node" else self.inter_node_gbps


@dataclass
class Finding:
    """A conclusion, with how it was reached. kind: node | link | group | scale | unresolved."""

    kind: str
    nodes: list[str]
    instrument: str
    how: str
    # node: judged alone on the node; straggler: named by the training's compute times; job:
    # named by a job itself (its hung ranks, Slurm's word, its refusing ranks); rounds: by the
    # pairs or the localisation
    scope: str = "rounds"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pairings(nodes: list[str]) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint pairs by the circle method of round-robin tournaments: two rounds for
    an even count, three for an odd one (each round then leaves one node out, a node at most
    once in three), so that every node meets at least two partners and no pair comes twice."""
    if len(nodes) < 3:
        return []
    ring: list[str | None] = [*nodes, None] if len(nodes) % 2 else list(nodes)
    count = len(ring)
    rounds = []
    for number in range(3 if len(nodes) % 2 else 2):
        # The first node stays put; the others turn one place per round.
        order = [ring[0], *(ring[1 + (i + number) % (count - 1)] for i in range(count - 1))]
        pairs = [(order[i], order[count - 1 - i]) for i in range(count // 2)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
    return rounds


def base_rounds(nodes: list[str], parts: tuple[str, ...], ranks_per_node: int, repeats: int,
                training_args: list[str], storage_args: list[str] | None = None,
                resume_args: list[str] | None = None) -> list[Round]:
    """The rounds of a healthy fleet, in order. Each node alone only where it runs more than one
    rank (one rank alone communicates nothing); pairs from three nodes (two: the pair is all).
    With resume_args (a training that saves a checkpoint), a training resumed from it follows.
    Storage comes last: a node slow to write a checkpoint still has its network and training
    judged, and every node writes at once, as a training's save does."""
    rounds: list[Round] = []
    if "communication" in parts:
        if ranks_per_node > 1:
            rounds.append(Round("nccl-tests on each node", BASE,
                                [Job("nccl-tests", "node", [node], repeats) for node in nodes]))
            rounds.append(Round("sweep on each node", BASE, [Job("sweep", "node", [node]) for node in nodes]))
        matchings = pairings(nodes)
        for number, pairs in enumerate(matchings, 1):
            rounds.append(Round(f"nccl-tests pairs {number}/{len(matchings)}", BASE,
                                [Job("nccl-tests", "pair", [a, b], repeats) for a, b in pairs]))
        if len(nodes) > 1:
            rounds.append(Round("nccl-tests on all nodes", BASE, [Job("nccl-tests", "all", list(nodes), repeats)]))
            rounds.append(Round("sweep on all nodes", BASE, [Job("sweep", "all", list(nodes))]))
    if "training" in parts:
        rounds.append(Round("smoke training", BASE, [Job("train", "training", list(nodes), 1, list(training_args))]))
        if resume_args:
            rounds.append(Round(RESUME_ROUND, BASE, [Job("train", "resume", list(nodes), 1, list(resume_args))]))
    if "storage" in parts:
        rounds.append(Round("checkpoint storage on each node", BASE,
                            [Job("storage", "node", [node], 1, list(storage_args or [])) for node in nodes]))
    return rounds


def estimate_s(rounds: list[Round], durations: dict[str, float]) -> float:
    """Wall time of the rounds: each takes as long as its longest job, whose repeats run in a row."""
    return sum(max((durations.get(job.instrument, DEFAULT_DURATIONS_S[job.instrument]) * job.repeats
                    for job in round_.jobs), default=0.0) for round_ in rounds)


def pair_reference(pairs: list[tuple[list[str], float]]) -> float | None:
    """What a sound pair reaches: the median over the nodes of each node's best pair. A bad node
    is in every one of its pairs (two of the three with three nodes), which can drag the median
    of the pairs down to its own level; its partners' best pairs are with sound nodes."""
    best: dict[str, float] = {}
    for nodes, value in pairs:
        for node in nodes:
            best[node] = max(best.get(node, value), value)
    return statistics.median(best.values()) if best else None


def _halves(nodes: list[str]) -> list[list[str]]:
    middle = len(nodes) // 2
    return [nodes[:middle], nodes[middle:]]


class Scheduler:
    """Hands out the rounds one at a time, each chosen from what the earlier ones showed.

    Call next_round(); run its jobs; give their outcomes (one per job, in order) to record();
    again, until next_round() returns None. `blamed` then names every node found at fault
    (with why), `findings` what was concluded and how."""

    def __init__(self, nodes: list[str], parts: tuple[str, ...], ranks_per_node: int, repeats: int,
                 training_args: list[str], limits: Limits, storage_args: list[str] | None = None,
                 resume_args: list[str] | None = None):
        self.nodes = list(nodes)
        self.parts = parts
        self.ranks_per_node = ranks_per_node
        self.repeats = repeats
        self.training_args = list(training_args)
        self.storage_args = list(storage_args or [])
        self.resume_args = list(resume_args or [])
        self.trained: list[str] = []  # the nodes of the last training that went well
        self.limits = limits
        self.rounds: list[Round] = []
        self.blamed: dict[str, list[str]] = {}
        self.findings: list[Finding] = []
        self.excluded: dict[str, str] = {}  # node -> the first round it was left out of
        self.known_good: set[str] = set()  # sound in an inter-node job, or cleared
        self._inbox: list[JobOutcome] | None = None
        self._flow = self._plan()

    # ---- the caller's side -------------------------------------------------------------
    def next_round(self) -> Round | None:
        inbox, self._inbox = self._inbox, None
        try:
            round_ = self._flow.send(inbox)  # type: ignore[arg-type]
        except StopIteration:
            return None
        self.rounds.append(round_)
        return round_

    def record(self, outcomes: list[JobOutcome]) -> None:
        for outcome in outcomes:
            if outcome.stragglers:
                self._blame(outcome.stragglers, f"straggler in {outcome.job.name}")
                self.findings.append(Finding("node", list(outcome.stragglers), outcome.job.instrument,
                                             f"straggler: {outcome.reason or 'computes slower than the others'}",
                                             "straggler"))
        self._inbox = outcomes

    # ---- helpers -----------------------------------------------------------------------
    def remaining(self) -> list[str]:
        return [node for node in self.nodes if node not in self.blamed]

    def _blame(self, nodes: list[str], why: str) -> None:
        for node in nodes:
            self.blamed.setdefault(node, []).append(why)
            self.known_good.discard(node)

    def _round(self, name: str, kind: str, jobs: list[Job]) -> Round | None:
        """The round over the nodes still in the running; None when no job is left."""
        remaining = set(self.remaining())
        kept = []
        for job in jobs:
            if job.scope in ("all", "training"):
                members = [node for node in job.nodes if node in remaining]
                for node in job.nodes:
                    if node not in remaining:
                        self.excluded.setdefault(node, name)
                if len(members) >= (1 if job.scope == "training" else 2):
                    kept.append(Job(job.instrument, job.scope, members, job.repeats, job.args, job.purpose))
            elif set(job.nodes) <= remaining:
                kept.append(job)
            else:
                for node in set(job.nodes) - remaining:
                    self.excluded.setdefault(node, name)
        return Round(name, kind, kept) if kept else None

    @staticmethod
    def _median(outcomes: list[JobOutcome]) -> float | None:
        values = [o.busbw_gbps for o in outcomes if o.status == "ok" and o.busbw_gbps is not None]
        return statistics.median(values) if values else None

    def _bad(self, outcome: JobOutcome, reference: float | None) -> bool:
        """Failed or hung; or below its floor, or more than the allowed share below the reference."""
        if outcome.status != "ok":
            return True
        if outcome.busbw_gbps is None:
            return False
        if outcome.busbw_gbps < self.limits.floor(outcome.job.scope):
            return True
        return reference is not None and outcome.busbw_gbps < reference * (1 - self.limits.variance_percent / 100)

    @staticmethod
    def _describe(outcome: JobOutcome, reference: float | None = None) -> str:
        if outcome.status != "ok":
            return outcome.status + (f" ({outcome.reason})" if outcome.reason else "")
        if outcome.busbw_gbps is None:
            return "ok"
        return f"{outcome.busbw_gbps:.3f} GB/s" + (f" against {reference:.3f}" if reference else "")

    def _take_named(self, outcome: JobOutcome, where: str) -> list[str]:
        named = [node for node in outcome.named if node not in self.blamed]
        if named:
            self._blame(named, f"{where}: {outcome.reason}")
            self.findings.append(Finding("node", named, outcome.job.instrument, f"{where}: {outcome.reason}",
                                         "job"))
        return named

    # ---- the flow ----------------------------------------------------------------------
    def _plan(self) -> Generator[Round, list[JobOutcome], None]:
        planned = base_rounds(self.nodes, self.parts, self.ranks_per_node, self.repeats, self.training_args,
                              self.storage_args, self.resume_args)
        pair_outcomes: list[JobOutcome] = []
        paired = False
        for template in planned:
            if template.name.startswith("nccl-tests pairs"):
                if paired:
                    continue  # the pairings are made together, over the nodes still in the running
                paired = True
                for number, pairs in enumerate(matchings := pairings(self.remaining()), 1):
                    round_ = self._round(f"nccl-tests pairs {number}/{len(matchings)}", BASE,
                                         [Job("nccl-tests", "pair", [a, b], self.repeats) for a, b in pairs])
                    if round_:
                        pair_outcomes += yield round_
                yield from self._localise_pairs(pair_outcomes)
                continue
            if template.name == RESUME_ROUND:
                # The nodes of the training that saved the checkpoint, none if none went well.
                trained = [node for node in self.trained if node not in self.blamed]
                if len(trained) != len(self.trained) or not trained:
                    continue
                outcome = (yield Round(RESUME_ROUND, BASE, [Job("train", "resume", trained, 1,
                                                                list(self.resume_args))]))[0]
                if outcome.status != "ok":
                    self._take_named(outcome, "resumed training")
                continue
            round_ = self._round(template.name, BASE, template.jobs)
            if round_ is None:
                continue
            outcomes = yield round_
            scope = round_.jobs[0].scope
            if round_.jobs[0].instrument == "storage":
                self._judge_storage(outcomes)
            elif scope == "node":
                yield from self._judge_alone(round_, outcomes)
            elif scope == "all":
                yield from self._judge_all(outcomes[0])
            elif scope == "training":
                yield from self._judge_training(outcomes[0])

    def _judge_alone(self, round_: Round, outcomes: list[JobOutcome]) -> Generator[Round, list[JobOutcome], None]:
        """Each node against the fleet median. A node that failed, or fell below the floor, is
        named at once. One that ran but measured slow against the others is measured again, the
        slow ones together in one round, and named only if slow again: a figure taken once can
        be a passing disturbance (a busy core, another process); a node slow twice is the node."""
        median = self._median(outcomes)
        slow = []
        for outcome in outcomes:
            if not self._bad(outcome, median):
                continue
            if (outcome.status == "ok" and outcome.busbw_gbps is not None
                    and outcome.busbw_gbps >= self.limits.floor(outcome.job.scope)):
                slow.append(outcome)
            else:
                self._name_alone(outcome, median)
        if not slow:
            return
        again = yield Round(f"{round_.name}: the slow ones measured again", LOCALISE,
                            [Job(o.job.instrument, o.job.scope, list(o.job.nodes), o.job.repeats, list(o.job.args),
                                 f"measured again: {self._describe(o, median)}") for o in slow])
        for first, outcome in zip(slow, again, strict=True):
            if self._bad(outcome, median):
                self._name_alone(outcome, median, f"; first {first.busbw_gbps:.3f} GB/s")

    def _name_alone(self, outcome: JobOutcome, median: float | None, before: str = "") -> None:
        how = f"{outcome.job.instrument} alone on the node: {self._describe(outcome, median)}{before}"
        self._blame(outcome.job.nodes, how)
        self.findings.append(Finding("node", list(outcome.job.nodes), outcome.job.instrument, how, "node"))

    def _judge_storage(self, outcomes: list[JobOutcome]) -> None:
        """A node that could not write or read its part of the checkpoint is named; how fast each
        wrote and read is judged by the criteria (against the fleet median and the thresholds)."""
        for outcome in outcomes:
            if outcome.status != "ok":
                how = f"checkpoint storage on the node: {self._describe(outcome)}"
                self._blame(outcome.job.nodes, how)
                self.findings.append(Finding("node", list(outcome.job.nodes), "storage", how, "node"))

    def _localise_pairs(self, outcomes: list[JobOutcome]) -> Generator[Round, list[JobOutcome], None]:
        median = pair_reference([(o.job.nodes, o.busbw_gbps) for o in outcomes
                                 if o.status == "ok" and o.busbw_gbps is not None])
        bad = [o for o in outcomes if self._bad(o, median)]
        for outcome in bad:
            self._take_named(outcome, f"named by its pair {outcome.job.label}")
        pairs_of: dict[str, list[JobOutcome]] = {}
        for outcome in outcomes:
            for node in outcome.job.nodes:
                pairs_of.setdefault(node, []).append(outcome)
        bad_of = {node: [o for o in mine if o in bad] for node, mine in pairs_of.items()}
        self.known_good |= {node for node, mine in bad_of.items() if not mine and node not in self.blamed}

        def partner(outcome: JobOutcome, node: str) -> str:
            return next(other for other in outcome.job.nodes if other != node)

        def evidence(node: str) -> str:
            return ", ".join(f"with {partner(o, node)} {self._describe(o, median)}" for o in bad_of[node])

        def unexplained(node: str) -> bool:
            """Bad in a pair that no named partner accounts for."""
            return any(partner(o, node) not in self.blamed for o in bad_of[node])

        # Bad with every partner, each partner sound with another: the common node.
        common = [node for node, mine in pairs_of.items() if len(mine) >= 2 and len(bad_of[node]) == len(mine)
                  and node not in self.blamed
                  and all(len(bad_of[partner(o, node)]) < len(pairs_of[partner(o, node)]) for o in mine)]
        others = sorted((node for node, mine in bad_of.items() if mine and node not in self.blamed
                         and node not in common),
                        key=lambda node: (-len(bad_of[node]), self.nodes.index(node)))
        cleared: set[str] = set()
        for suspects in (common, others):
            tested, untested = yield from self._with_known_good("nccl-tests", suspects, median, evidence,
                                                               unexplained)
            cleared |= tested
            for node in untested:
                if node in common:
                    how = f"bad with every partner ({evidence(node)}), each of them sound with another"
                    self._blame([node], f"nccl-tests pairs: {how}")
                    self.findings.append(Finding("node", [node], "nccl-tests", how))
                elif unexplained(node):
                    self._unresolved("nccl-tests", node, evidence(node), any(o.status != "ok" for o in bad_of[node]))
                else:
                    cleared.add(node)
        for outcome in bad:
            if any(node in self.blamed for node in outcome.job.nodes):
                continue
            if all(node in cleared for node in outcome.job.nodes):
                self.findings.append(Finding("link", list(outcome.job.nodes), "nccl-tests",
                                             f"pair {outcome.job.label} {self._describe(outcome, median)}; both "
                                             "nodes are sound with other partners: the path between them"))

    def _unresolved(self, instrument: str, node: str, evidence: str, failed: bool) -> None:
        """A suspect no known-good node could be found for: named, and blamed where its job failed
        outright (a lagging one fails the fleet's checks, not the node)."""
        how = f"bad ({evidence}), and no known-good node to compare it with"
        if failed:
            self._blame([node], f"{instrument}: {how}")
        self.findings.append(Finding("unresolved", [node], instrument, how))

    def _with_known_good(self, instrument: str, suspects: list[str], reference: float | None,
                         evidence: Callable[[str], str], still_suspect: Callable[[str], bool] | None = None,
                         args: list[str] | None = None,
                         ) -> Generator[Round, list[JobOutcome], tuple[set[str], list[str]]]:
        """Each suspect with a known-good partner of its own, as many at once as there are
        partners, until none is left. A suspect bad again is named. Returns the suspects cleared
        and those no partner was found for."""
        cleared: set[str] = set()
        queue = [node for node in suspects if node not in self.blamed]
        while queue:
            if still_suspect is not None:
                for node in [node for node in queue if not still_suspect(node)]:
                    queue.remove(node)
                    cleared.add(node)
            partners = [node for node in self.nodes if node in self.known_good and node not in queue]
            if not queue or not partners:
                break
            batch = list(zip(queue, partners, strict=False))
            queue = queue[len(batch):]
            training = instrument == "train"
            round_ = self._round(f"localise: {instrument}, suspects with known-good partners", LOCALISE,
                                 [Job(instrument, "training" if training else "locate", [suspect, good],
                                      1 if training else self.repeats, list(args or []),
                                      f"{suspect} with known-good {good}") for suspect, good in batch])
            if round_ is None:
                break
            outcomes = yield round_
            for outcome in outcomes:
                suspect, good = outcome.job.nodes
                if outcome.named and set(outcome.named) != {suspect}:
                    self._take_named(outcome, f"named by {outcome.job.name}")
                if suspect in self.blamed:
                    continue
                if self._bad(outcome, reference):
                    how = f"bad ({evidence(suspect)}); with known-good {good}: {self._describe(outcome, reference)}"
                    self._blame([suspect], f"{instrument} localisation: {how}")
                    self.findings.append(Finding("node", [suspect], instrument, how))
                else:
                    cleared.add(suspect)
                    self.known_good.add(suspect)
        return cleared, queue

    def _judge_all(self, outcome: JobOutcome) -> Generator[Round, list[JobOutcome], None]:
        if not self._bad(outcome, None):
            self.known_good |= set(outcome.job.nodes) - set(self.blamed)
            return
        if self._take_named(outcome, f"named by {outcome.job.name}"):
            return
        if self._explained(outcome.job):
            return
        yield from self._bisect(outcome)

    def _explained(self, job: Job) -> bool:
        """A link or group already found among the job's nodes accounts for its failure."""
        return any(finding.kind in ("link", "group", "unresolved") and set(finding.nodes) <= set(job.nodes)
                   for finding in self.findings)

    def _judge_training(self, outcome: JobOutcome) -> Generator[Round, list[JobOutcome], None]:
        if outcome.status == "ok":
            self.trained = list(outcome.job.nodes)
            return
        if self._take_named(outcome, "smoke training"):
            rest = [node for node in outcome.job.nodes if node not in self.blamed]
            # The others have not finished a training: they train again without the named nodes.
            round_ = self._round("smoke training without the named nodes", LOCALISE, [
                Job("train", "training", rest, 1, outcome.job.args,
                    f"without {', '.join(n for n in outcome.job.nodes if n in self.blamed)}")])
            if round_ is None:
                return
            again = (yield round_)[0]
            if again.status == "ok":
                self.trained = list(again.job.nodes)
            if again.status != "ok" and not self._take_named(again, "smoke training again") and \
                    not self._explained(again.job):
                yield from self._bisect(again)
            return
        if not self._explained(outcome.job):
            yield from self._bisect(outcome)

    def _bisect(self, outcome: JobOutcome) -> Generator[Round, list[JobOutcome], None]:
        """Halve the failing set, run both halves at once, halve each bad half again; the last
        two or three nodes of a bad half run with known-good partners."""
        job = outcome.job
        instrument = job.instrument
        failing, small, first = [job.nodes], [], True
        while failing:
            failing, small = [s for s in failing if len(s) >= 4], small + [s for s in failing if len(s) < 4]
            if not failing:
                break
            jobs = [Job(instrument, "half", half, job.repeats, job.args, f"half of {len(members)} nodes")
                    for members in failing for half in _halves(members)]
            round_ = self._round(f"localise: {instrument} on halves", LOCALISE, jobs)
            if round_ is None:
                break
            outcomes = yield round_
            best = max((o.busbw_gbps for o in outcomes if o.status == "ok" and o.busbw_gbps is not None),
                       default=None)
            failing = []
            for half in outcomes:
                if self._take_named(half, f"named by {instrument} on {len(half.job.nodes)} nodes"):
                    continue
                if self._bad(half, best):
                    failing.append(half.job.nodes)
                else:
                    self.known_good |= set(half.job.nodes) - set(self.blamed)
            if first and not failing and not self.blamed.keys() & set(job.nodes):
                self.findings.append(Finding("scale", list(job.nodes), instrument,
                                             f"{self._describe(outcome)} on all {len(job.nodes)} nodes, sound on "
                                             "each half: a problem of scale (fabric, topology), not of one node"))
            first = False
        for members in small:
            members = [node for node in members if node not in self.blamed]
            if not members:
                continue
            cleared, untested = yield from self._with_known_good(
                instrument, members, None, lambda node, members=members: f"in the failing set {'+'.join(members)}",
                args=job.args)
            for node in untested:
                self._unresolved(instrument, node, f"{job.name}: {self._describe(outcome)}", outcome.status != "ok")
            if members and set(members) <= cleared:
                self.findings.append(Finding("group", members, instrument,
                                             f"{instrument} bad on {'+'.join(members)} together, each node sound "
                                             "with a known-good partner"))
