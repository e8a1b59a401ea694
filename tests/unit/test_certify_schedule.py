"""The certification's schedule on simulated fleets of 2 to 1,024 nodes: disjoint rounds, every
node covered, a bounded number of rounds, and any single bad node or link named within
log2(N) + 3 extra rounds (none for a healthy fleet)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from provisioner.certify.schedule import (
    BASE,
    Job,
    JobOutcome,
    Limits,
    Scheduler,
    base_rounds,
    estimate_s,
    pairings,
)

LIMITS = Limits(intra_node_gbps=400.0, inter_node_gbps=300.0, variance_percent=5.0)
SIZES = [2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 64, 100, 127, 128, 255, 256, 512, 1000, 1023, 1024]
PARTS = ("communication", "training")


def fleet(count: int) -> list[str]:
    return [f"gpu{number:04d}" for number in range(1, count + 1)]


@dataclass
class SimulatedFleet:
    """Hardware faults; each job's outcome follows from them as it would on a cluster."""

    slow_nodes: set[str] = field(default_factory=set)
    slow_links: set[frozenset[str]] = field(default_factory=set)
    hung_nodes: set[str] = field(default_factory=set)  # ranks stop; torch payloads name them, nccl-tests cannot
    dead_nodes: set[str] = field(default_factory=set)  # Slurm reports the node failed
    slow_at_scale: int = 0  # from this many nodes on every all-reduce lags (a fabric limit)

    def outcome(self, job: Job) -> JobOutcome:
        members = set(job.nodes)
        if members & self.dead_nodes:
            return JobOutcome(job, "failed", named=sorted(members & self.dead_nodes), reason="node failure")
        if members & self.hung_nodes:
            named = sorted(members & self.hung_nodes) if job.instrument != "nccl-tests" else []
            return JobOutcome(job, "hung", named=named, reason="ranks stopped")
        if job.instrument == "train":
            return JobOutcome(job, "ok")
        busbw = 450.0 if job.scope == "node" else 350.0
        if members & self.slow_nodes or any(link <= members for link in self.slow_links):
            busbw *= 0.5
        if self.slow_at_scale and len(members) >= self.slow_at_scale:
            busbw *= 0.6
        return JobOutcome(job, "ok", busbw)


def run(scheduler: Scheduler, hardware: SimulatedFleet) -> Scheduler:
    while (round_ := scheduler.next_round()) is not None:
        busy = [node for job in round_.jobs for node in job.nodes]
        assert len(busy) == len(set(busy)), f"{round_.name}: a node in two jobs at once"
        assert not set(busy) & set(scheduler.blamed) or round_.kind != BASE
        scheduler.record([hardware.outcome(job) for job in round_.jobs])
        assert len(scheduler.rounds) < 200
    return scheduler


def scheduler_for(nodes: list[str], ranks: int = 8, parts=PARTS) -> Scheduler:
    return Scheduler(nodes, parts, ranks, 3, ["--steps", "1000"], LIMITS)


def extra_rounds(scheduler: Scheduler) -> int:
    return sum(round_.kind != BASE for round_ in scheduler.rounds)


@pytest.mark.parametrize("count", SIZES)
def test_pairings_are_disjoint_and_give_every_node_two_partners(count: int):
    nodes = fleet(count)
    rounds = pairings(nodes)
    if count < 3:
        assert rounds == []
        return
    assert len(rounds) == (2 if count % 2 == 0 else 3)
    partners: dict[str, set[str]] = {node: set() for node in nodes}
    seen = set()
    for pairs in rounds:
        busy = [node for pair in pairs for node in pair]
        assert len(busy) == len(set(busy))
        for a, b in pairs:
            assert frozenset((a, b)) not in seen
            seen.add(frozenset((a, b)))
            partners[a].add(b)
            partners[b].add(a)
    assert min(len(p) for p in partners.values()) >= 2


@pytest.mark.parametrize("count", SIZES)
def test_a_healthy_fleet_runs_only_the_base_rounds(count: int):
    nodes = fleet(count)
    scheduler = run(scheduler_for(nodes), SimulatedFleet())
    assert extra_rounds(scheduler) == 0 and not scheduler.blamed and not scheduler.findings
    names = [round_.name for round_ in scheduler.rounds]
    assert len(names) <= 10  # 2 alone, 3 pairings at most, 2 all nodes, 1 training
    covered_alone = {job.nodes[0] for round_ in scheduler.rounds for job in round_.jobs if job.scope == "node"}
    assert covered_alone == set(nodes)
    training = [job for round_ in scheduler.rounds for job in round_.jobs if job.scope == "training"]
    assert len(training) == 1 and training[0].nodes == nodes


def test_one_rank_per_node_skips_the_node_rounds_and_two_nodes_have_no_pairs():
    names = [r.name for r in base_rounds(fleet(2), PARTS, 1, 3, [])]
    assert names == ["nccl-tests on all nodes", "sweep on all nodes", "smoke training"]
    assert [r.name for r in base_rounds(fleet(1), ("communication",), 1, 3, [])] == []


@pytest.mark.parametrize("count", [c for c in SIZES if c >= 3])
def test_any_single_slow_node_is_named_alone(count: int):
    nodes = fleet(count)
    for bad in {nodes[0], nodes[count // 2], nodes[-1]}:
        # slow across nodes only: the pairs must find it
        scheduler = scheduler_for(nodes, ranks=1)
        hardware = SimulatedFleet(slow_nodes={bad})
        original = hardware.outcome
        hardware.outcome = lambda job, original=original: (JobOutcome(job, "ok", 450.0) if job.scope == "node"
                                                          else original(job))
        run(scheduler, hardware)
        assert set(scheduler.blamed) == {bad}, scheduler.findings
        assert extra_rounds(scheduler) <= math.log2(count) + 3
        # left out of what follows: the all-nodes test and the training certify the others
        training = [job for r in scheduler.rounds for job in r.jobs if job.scope == "training"]
        assert training[-1].nodes == [node for node in nodes if node != bad]


@pytest.mark.parametrize("count", [5, 17, 1024])
def test_a_node_slow_alone_is_measured_again_and_named_only_if_slow_twice(count: int):
    """One node measured slow on its own (a busy core during the measurement), fine when measured
    again: nobody is named. Another slow both times: named, with both figures. The slow ones of
    the round are measured again together, in one extra round."""
    nodes = fleet(count)
    passing, lasting = nodes[0], nodes[-1]
    hardware = SimulatedFleet()
    measured: dict[str, int] = {}

    def outcome(job: Job) -> JobOutcome:
        if job.scope != "node" or job.instrument != "nccl-tests":
            return SimulatedFleet().outcome(job)
        node = job.nodes[0]
        measured[node] = measured.get(node, 0) + 1
        slow = node == lasting or (node == passing and measured[node] == 1)
        return JobOutcome(job, "ok", 410.0 if slow else 450.0)  # above the floor, 400

    hardware.outcome = outcome  # type: ignore[method-assign]
    scheduler = run(scheduler_for(nodes), hardware)
    assert set(scheduler.blamed) == {lasting}, scheduler.blamed
    assert measured[passing] == measured[lasting] == 2
    assert all(count == 1 for node, count in measured.items() if node not in (passing, lasting))
    again = [r for r in scheduler.rounds if r.name.endswith("measured again")]
    assert len(again) == 1 and [job.nodes[0] for job in again[0].jobs] == [passing, lasting]
    assert "410.000 GB/s against 450.000; first 410.000 GB/s" in scheduler.blamed[lasting][0]


def test_a_node_below_the_floor_alone_is_named_without_measuring_it_again():
    nodes = fleet(4)
    hardware = SimulatedFleet()
    original = hardware.outcome
    hardware.outcome = lambda job: (JobOutcome(job, "ok", 100.0) if job.scope == "node" and job.nodes == [nodes[1]]
                                    else original(job))  # type: ignore[method-assign]
    scheduler = run(scheduler_for(nodes), hardware)
    assert set(scheduler.blamed) == {nodes[1]}
    assert not [r for r in scheduler.rounds if r.name.endswith("measured again")]


@pytest.mark.parametrize("count", [c for c in SIZES if c >= 4])
def test_any_single_slow_link_is_named_and_blames_no_node(count: int):
    nodes = fleet(count)
    scheduler = scheduler_for(nodes)
    first_pairs = pairings(nodes)[0]
    for a, b in {first_pairs[0], first_pairs[-1]}:
        scheduler = run(scheduler_for(nodes), SimulatedFleet(slow_links={frozenset((a, b))}))
        assert not scheduler.blamed
        links = [f for f in scheduler.findings if f.kind == "link"]
        assert [sorted(f.nodes) for f in links] == [sorted((a, b))]
        assert extra_rounds(scheduler) <= math.log2(count) + 3


@pytest.mark.parametrize("count", [4, 16, 128, 1024])
def test_a_node_that_hangs_only_in_the_all_nodes_run_is_bisected(count: int):
    nodes = fleet(count)
    bad = nodes[count // 3]
    hardware = SimulatedFleet()

    def outcome(job: Job) -> JobOutcome:
        if job.instrument == "nccl-tests" and bad in job.nodes and job.scope in ("all", "half", "locate"):
            return JobOutcome(job, "hung", reason="no output for 300 s")
        return SimulatedFleet.outcome(hardware, job)

    hardware.outcome = outcome
    scheduler = run(scheduler_for(nodes), hardware)
    assert set(scheduler.blamed) == {bad}
    assert extra_rounds(scheduler) <= math.log2(count) + 3


@pytest.mark.parametrize("count", [2, 3, 64])
def test_a_hung_training_names_the_node_and_the_others_train_again(count: int):
    nodes = fleet(count)
    bad = nodes[-1]
    scheduler = scheduler_for(nodes, parts=("training",))
    hardware = SimulatedFleet()
    hardware.outcome = lambda job: (JobOutcome(job, "hung", named=[bad], reason="ranks 6-7 stopped at step 40")
                                    if bad in job.nodes else JobOutcome(job, "ok"))
    run(scheduler, hardware)
    assert set(scheduler.blamed) == {bad}
    trainings = [job.nodes for r in scheduler.rounds for job in r.jobs]
    assert trainings == [nodes, nodes[:-1]]


def test_a_problem_of_scale_names_no_node():
    nodes = fleet(64)
    scheduler = run(scheduler_for(nodes), SimulatedFleet(slow_at_scale=64))
    assert not scheduler.blamed
    assert [f.kind for f in scheduler.findings] == ["scale", "scale"]  # nccl-tests and the sweep


def test_a_dead_node_fails_only_itself():
    nodes = fleet(16)
    scheduler = run(scheduler_for(nodes), SimulatedFleet(dead_nodes={"gpu0005"}))
    assert set(scheduler.blamed) == {"gpu0005"}
    assert extra_rounds(scheduler) == 0


def test_a_node_failing_alone_is_left_out_of_the_pairs():
    nodes = fleet(8)
    scheduler = run(scheduler_for(nodes), SimulatedFleet(slow_nodes={"gpu0003"}))
    assert set(scheduler.blamed) == {"gpu0003"}
    pairs = [job for r in scheduler.rounds for job in r.jobs if job.scope == "pair"]
    assert pairs and all("gpu0003" not in job.nodes for job in pairs)
    assert scheduler.excluded["gpu0003"] == "sweep on each node" or "gpu0003" in scheduler.excluded


def test_two_nodes_whose_pair_fails_cannot_be_told_apart():
    nodes = fleet(2)
    hardware = SimulatedFleet()
    hardware.outcome = lambda job: JobOutcome(job, "failed", reason="exit status 1") if (
        job.scope == "all" and job.instrument == "nccl-tests") else SimulatedFleet.outcome(SimulatedFleet(), job)
    scheduler = run(scheduler_for(nodes), hardware)
    assert set(scheduler.blamed) == set(nodes)
    assert {f.kind for f in scheduler.findings} == {"unresolved"}


def test_estimate_is_the_longest_job_of_each_round():
    rounds = base_rounds(fleet(128), PARTS, 8, 3, [])
    durations = {"nccl-tests": 20.0, "sweep": 40.0, "train": 600.0}
    # 2 alone + 2 pairings + 2 all nodes + training
    assert estimate_s(rounds, durations) == 60 + 40 + 60 + 60 + 60 + 40 + 600


@pytest.mark.parametrize("count", [3, 4, 5, 8, 33])
def test_a_slow_node_above_every_floor_is_named_by_its_pairs_alone(count: int):
    # the lab's case: floors far below what the nodes reach, only the comparison names the node
    nodes = fleet(count)
    bad = nodes[-1]
    lenient = Limits(intra_node_gbps=0.05, inter_node_gbps=0.02, variance_percent=40)
    scheduler = Scheduler(nodes, ("communication",), 1, 3, [], lenient)
    hardware = SimulatedFleet()
    hardware.outcome = lambda job: JobOutcome(job, "ok", 0.05 if bad in job.nodes and job.scope != "node" else 0.65)
    run(scheduler, hardware)
    assert set(scheduler.blamed) == {bad}
    pair_rounds = [r for r in scheduler.rounds if r.name.startswith("nccl-tests pairs")]
    all_nodes = [job for r in scheduler.rounds for job in r.jobs if job.scope == "all"]
    assert pair_rounds and all(bad not in job.nodes for job in all_nodes)


def test_every_fleet_size_from_2_to_1024_has_a_bounded_number_of_disjoint_rounds():
    for count in range(2, 1025):
        nodes = fleet(count)
        rounds = base_rounds(nodes, PARTS, 8, 3, [])
        assert len(rounds) <= 8, count
        partners: dict[str, set[str]] = {}
        for round_ in rounds:
            busy = [node for job in round_.jobs for node in job.nodes]
            assert len(busy) == len(set(busy)), (count, round_.name)
            for job in round_.jobs:
                if job.scope == "pair":
                    a, b = job.nodes
                    partners.setdefault(a, set()).add(b)
                    partners.setdefault(b, set()).add(a)
        if count >= 3:
            assert len(partners) == count and min(map(len, partners.values())) >= 2, count


def test_a_training_that_went_well_is_resumed_from_its_checkpoint_and_a_failed_one_is_not():
    nodes = [f"gpu{n:02d}" for n in range(1, 5)]
    for status, resumed in (("ok", True), ("failed", False)):
        scheduler = Scheduler(nodes, ("training",), 8, 3, ["--save-at", "980"], LIMITS,
                              resume_args=["--rotate-nodes", "--resume"])
        training = scheduler.next_round()
        assert training is not None and training.jobs[0].args == ["--save-at", "980"]
        scheduler.record([JobOutcome(training.jobs[0], status, named=[] if status == "ok" else ["gpu02"],
                                     reason="hung")])
        following = scheduler.next_round()
        if resumed:
            assert following is not None and following.name == "smoke training resumed from its checkpoint"
            assert following.jobs[0].scope == "resume" and following.jobs[0].nodes == nodes
            assert following.jobs[0].args == ["--rotate-nodes", "--resume"]
            scheduler.record([JobOutcome(following.jobs[0], "ok")])
            assert scheduler.next_round() is None
        else:
            # the others train again without gpu02; no resume after a failed training
            assert following is not None and following.name == "smoke training without the named nodes"
            scheduler.record([JobOutcome(following.jobs[0], "failed", reason="exit status 1")])
            names = []
            while (round_ := scheduler.next_round()) is not None:
                names.append(round_.name)
                scheduler.record([JobOutcome(job, "ok") for job in round_.jobs])
            assert "smoke training resumed from its checkpoint" not in names
