"""Reading what certification jobs printed: heartbeats and the ranks that hung first, Slurm's
word on failed nodes (real srun 22.05 lines, from the lab), and a job's outcome for the schedule."""

from __future__ import annotations

import json

from provisioner.certify.outputs import (
    HEARTBEAT_MARK,
    START_MARK,
    Watch,
    failed_nodes,
    job_outcome,
    nvls_failure,
    stragglers,
)
from provisioner.certify.schedule import Job

NODES = ["gpu01", "gpu02", "gpu03"]


def beat(rank: int, host: str, position: int, where: str) -> str:
    return HEARTBEAT_MARK + json.dumps({"r": rank, "h": host, "p": position, "w": where}) + "\n"


def running(watch: Watch, seconds: int, stopped: set[int] = frozenset(), every: int = 2) -> float:
    """Every rank beats every `every` s; those in `stopped` stop after the first beat. Ranks
    0-5, two per node; all reach step 10's collective except stopped ones, left in compute."""
    now = 0.0
    for tick in range(0, seconds + 1, every):
        now = float(tick)
        for rank in range(6):
            if rank in stopped and tick > 0:
                continue
            host = NODES[rank // 2]
            where, position = (("step 10 compute", 20) if rank in stopped else ("step 10 collective", 21))
            watch.feed(beat(rank, host, position, where), now)
    return now


def test_a_stopped_node_is_named_and_the_waiting_ones_are_not():
    watch = Watch(NODES, 0.0, heartbeats=True)
    watch.feed(START_MARK + '{"host": "gpu01", "task": 0}\n', 0.0)
    now = running(watch, 60, stopped={4, 5})
    assert watch.stalled_for(now) == 60.0  # nothing moved after the first beats
    named, detail = watch.hung(heartbeat_s=2)
    assert named == ["gpu03"]
    assert "gpu03: ranks 4,5 fell silent 60 s before the others (last heard at step 10 compute)" in detail
    assert "the others wait at step 10 collective" in detail


def test_a_silent_node_is_named_though_a_sound_nodes_ranks_wait_a_collective_apart():
    """As on the lab: gpu02's ranks stopped (SIGSTOP) at step 17; gpu01's two ranks go on printing
    where they wait, one of them a collective ahead of the other (gloo's ranks leave an
    all-reduce one after the other). The silent node is named, not both."""
    watch = Watch(NODES[:2], 0.0, heartbeats=True)
    watch.feed(beat(2, "gpu02", 36, "step 16 collective") + beat(3, "gpu02", 37, "step 17 compute"), 0.0)
    for tick in range(2, 41, 2):
        watch.feed(beat(0, "gpu01", 54, "step 25 collective") + beat(1, "gpu01", 56, "step 26 collective"),
                   float(tick))
    named, detail = watch.hung(heartbeat_s=2)
    assert named == ["gpu02"] and "gpu02: ranks 2,3 fell silent 40 s before the others" in detail


def test_a_rank_stuck_in_its_compute_while_alive_is_behind():
    watch = Watch(NODES, 0.0, heartbeats=True)
    now = 0.0
    for tick in range(0, 31, 2):
        now = float(tick)
        for rank in range(6):
            stuck = rank == 1
            watch.feed(beat(rank, NODES[rank // 2], 20 if stuck else 21,
                            "step 10 compute" if stuck else "step 10 collective"), now)
    named, detail = watch.hung(heartbeat_s=2)
    assert named == ["gpu01"] and "gpu01: ranks 1 stayed at step 10 compute" in detail


def test_ranks_that_all_wait_together_name_nobody():
    watch = Watch(NODES, 0.0, heartbeats=True)
    running(watch, 30)
    assert watch.hung(heartbeat_s=2)[0] == []


def test_a_node_never_heard_from_is_named_and_lines_may_arrive_in_pieces():
    watch = Watch(NODES, 0.0, heartbeats=True)
    line = beat(0, "gpu01", 5, "step 2 collective") + beat(2, "gpu02", 5, "step 2 collective")
    watch.feed(line[:30], 1.0)
    assert not watch.ranks  # half a line waits for the rest
    watch.feed(line[30:], 1.5)
    assert set(watch.ranks) == {0, 2} and watch.last_progress == 1.5
    assert watch.hung(heartbeat_s=2)[0] == ["gpu03"]


def test_output_is_progress_for_nccl_tests():
    watch = Watch(NODES, 0.0, heartbeats=False)
    watch.feed("#  size count\n", 5.0)
    watch.feed("   33554432  8388608 float sum -1 1059.9 31.66 59.36 0\n", 9.0)
    assert watch.stalled_for(20.0) == 11.0
    assert watch.hung(2)[0] == []  # nccl-tests' ranks report nothing: the rounds localise it


def test_slurm_names_the_node_that_failed_not_the_tasks_it_then_terminated():
    # srun 22.05 on the lab: gpu02's task killed by a signal, gpu01's terminated by --kill-on-bad-exit
    stderr = ("srun: error: gpu02: task 1: Killed\n"
              "srun: launch/slurm: _step_signal: Terminating StepId=5.0\n"
              "slurmstepd-gpu01: error: *** STEP 5.0 ON gpu01 CANCELLED AT 2026-12-06T20:34:19 ***\n"
              "srun: error: gpu01: task 0: Terminated\n"
              "srun: Force Terminated StepId=5.0\n")
    assert failed_nodes(stderr) == (["gpu02"], "srun: error: gpu02: task 1: Killed")
    # a program's own exit status is not the node's failure
    exited = ("srun: error: gpu02: task 1: Exited with exit code 3\n"
              "srun: launch/slurm: _step_signal: Terminating StepId=4.0\n"
              "srun: error: gpu01: task 0: Terminated\n")
    assert failed_nodes(exited) == ([], "")
    assert failed_nodes("srun: error: Node failure on gpu07\n")[0] == ["gpu07"]
    assert failed_nodes("srun: error: Task launch for StepId=9.0 failed on node gpu03: Invalid node name\n")[0] == [
        "gpu03"]


def sweep_stdout(busbw: float, wrong: int = 0) -> str:
    rows = [{"size_bytes": 1 << 20, "busbw_gbps": busbw, "wrong": wrong}]
    return "PROVISION-SWEEP " + json.dumps({"rows": rows}) + "\n"


def test_job_outcome_takes_the_median_of_its_repeats_and_stops_at_a_failure():
    job = Job("sweep", "pair", ["gpu01", "gpu02"], repeats=3)
    runs = [{"rc": 0, "stdout": sweep_stdout(v), "stderr": ""} for v in (1.0, 3.0, 2.0)]
    assert job_outcome(job, runs, 1 << 20, 10).busbw_gbps == 2.0
    wrong = job_outcome(job, [{"rc": 0, "stdout": sweep_stdout(1.0, wrong=4), "stderr": ""}], 1 << 20, 10)
    assert wrong.status == "failed" and wrong.reason == "4 wrong values"
    killed = job_outcome(job, [{"rc": 137, "stdout": "", "stderr": "srun: error: gpu02: task 1: Killed\n"}],
                         1 << 20, 10)
    assert killed.status == "failed" and killed.named == ["gpu02"]
    hung = job_outcome(job, [{"rc": 1, "stdout": "", "stderr": "", "hung": True, "hung_named": ["gpu01"],
                              "hung_detail": "gpu01 fell silent"}], 1 << 20, 10)
    assert hung.status == "hung" and hung.named == ["gpu01"]


def test_a_training_names_its_stragglers_and_the_ranks_whose_gradients_differ():
    ranks = [{"rank": r, "host": f"gpu0{r // 2 + 1}", "compute_median_s": 0.1 if r != 3 else 0.125}
             for r in range(6)]
    assert [s["rank"] for s in stragglers({"ranks": ranks}, 10)] == [3]
    assert stragglers({"ranks": ranks}, 30) == []
    job = Job("train", "training", NODES)
    facts = {"ranks": ranks, "violation": None}
    outcome = job_outcome(job, [{"rc": 0, "stdout": "PROVISION-TRAIN " + json.dumps(facts) + "\n"}], 1, 10)
    assert outcome.status == "ok" and outcome.stragglers == ["gpu02"] and "rank 3 on gpu02" in outcome.reason
    facts["violation"] = {"check": "grad_norm_consistency", "step": 20, "ranks": [5], "hosts": ["gpu03"]}
    outcome = job_outcome(job, [{"rc": 0, "stdout": "PROVISION-TRAIN " + json.dumps(facts) + "\n"}], 1, 10)
    assert outcome.status == "failed" and outcome.named == ["gpu03"]


def test_a_torch_job_that_failed_setting_up_nvls_says_so_in_words():
    job = Job("train", "training", ["gpu01", "gpu02"])
    stdout = ("gpu01:4242:4300 [3] NCCL INFO NVLS multicast support is available on dev 3\n"
              "gpu01:4242:4300 [3] transport/nvls.cc:152 NCCL WARN Cuda failure 801 'operation not supported'\n")
    stderr = "torch.distributed.DistBackendError: NCCL error: unhandled cuda error\n"
    outcome = job_outcome(job, [{"rc": 1, "stdout": stdout, "stderr": stderr}], 1 << 20, 10)
    assert outcome.status == "failed"
    assert outcome.reason == "NVLS unavailable: fabric manager? (gpu01: Cuda failure 801 'operation not supported')"
    # No NVLS on a node without NVSwitch is NCCL's information, not a failure.
    assert nvls_failure("gpu01:1:2 [0] NCCL INFO NVLS multicast support is not available on dev 0\n") is None
