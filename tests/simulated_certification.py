"""A certification of a simulated fleet, as certification.json holds it: the real scheduler picks
the rounds, the real criteria judge outputs in the instruments' own formats (a real nccl-tests
table, scaled per job; the sweep's and the trainer's marked lines). The hardware: one node slow
alone, one node whose network is slow, one straggling rank; every other node sound."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

from provisioner.certify import criteria
from provisioner.certify.profiles import thresholds
from provisioner.certify.schedule import Job, JobOutcome, Limits, Scheduler

NCCL_TABLE = (Path(__file__).parent / "fixtures" / "nccl" / "all_reduce_h100_1node_8gpu_nccltests2.17.8.txt"
              ).read_text()
GRADIENT = 8589934592
RANKS_PER_NODE = 8
_ROW = re.compile(r"^(\s+\d+\s+\d+\s+\w+\s+\w+\s+-?\d+\s+)(\S+)\s+(\S+)\s+(\S+)(\s+\d+\s+)(\S+)\s+(\S+)\s+(\S+)(.*)$")


def fleet(count: int) -> list[str]:
    return [f"gpu{number:03d}" for number in range(1, count + 1)]


def nccl_output(scale: float, hosts: list[str]) -> str:
    """The real H100 table, its bandwidths scaled, its ranks on the job's hosts."""
    lines = []
    for line in NCCL_TABLE.splitlines():
        if match := _ROW.match(line):
            g = match.groups()
            line = (f"{g[0]}{g[1]} {float(g[2]) * scale:.2f} {float(g[3]) * scale:.2f}{g[4]}{g[5]} "
                    f"{float(g[6]) * scale:.2f} {float(g[7]) * scale:.2f}{g[8]}")
        elif " on cnode3-002 device " in line:
            rank = int(line.split("Rank")[1].split()[0])
            line = line.replace("cnode3-002", hosts[rank % len(hosts)])
        lines.append(line)
    return "\n".join(lines) + "\n"


def sweep_output(busbw: float, hosts: list[str]) -> str:
    rows = [{"size_bytes": size, "count": size // 4, "time_us": 1.0, "algbw_gbps": busbw / 1.75,
             "busbw_gbps": busbw, "wrong": 0} for size in (104857600, 1 << 30, GRADIENT)]
    return "PROVISION-SWEEP " + json.dumps({"collective": "all_reduce", "ranks": len(hosts) * RANKS_PER_NODE,
                                            "hosts": hosts, "rows": rows}) + "\n"


def training_output(nodes: list[str], straggler: str | None, steps: int = 200) -> str:
    ranks = []
    for index, node in enumerate(nodes):
        for local in range(RANKS_PER_NODE):
            rank = index * RANKS_PER_NODE + local
            slow = node == straggler and local == 3
            ranks.append({"rank": rank, "local_rank": local, "host": node, "device": "cuda", "cpus": 12,
                          "cpu_list": "0-11", "node_cpus": 96, "compute_median_s": 0.62 if slow else 0.30 + 0.01 * (
                              rank % 5) / 5, "compute_p90_s": 0.33, "wait_median_s": 0.05, "step_median_s": 0.4,
                          "nccl_version": "2.21.5"})
    facts = {"world": len(ranks), "hosts": [r["host"] for r in ranks], "backend": "nccl", "preset": "1b",
             "device_name": "NVIDIA H100 80GB HBM3", "steps_requested": steps, "steps_done": steps,
             "warmup_steps": 20, "parameters": 1.2e9, "bf16": True, "loss_drop_min": 0.4, "bucket_mb": 100.0,
             "peak_tflops": 989.0, "fault_injected": False, "violation": None,
             "parameter_checksums": [123.5] * len(ranks), "elapsed_s": 90.0, "tokens_per_second": 2.4e6,
             "mfu": 0.41, "ranks": ranks,
             "series": {"mean_loss": [10.5 * 0.985 ** step + 2.0 for step in range(steps)],
                        "grad_norm": [3.0 * 0.99 ** step + 0.4 for step in range(steps)],
                        "step_time_s": [0.42 + 0.01 * ((step * 7) % 5) for step in range(steps)]}}
    return "PROVISION-TRAIN " + json.dumps(facts) + "\n"


class Hardware:
    def __init__(self, slow_alone: str, slow_network: str):
        self.slow_alone, self.slow_network = slow_alone, slow_network

    def busbw(self, job: Job) -> float:
        if job.scope == "node":
            return 470.0 * (0.5 if job.nodes == [self.slow_alone] else 1.0) * (1 if job.instrument != "sweep" else 0.97)
        return 370.0 * (0.4 if self.slow_network in job.nodes else 1.0)

    def outcome(self, job: Job) -> JobOutcome:
        if job.instrument in ("train", "storage"):
            return JobOutcome(job, "ok")
        return JobOutcome(job, "ok", self.busbw(job))

    def output(self, job: Job) -> str:
        if job.instrument == "train":
            return training_output(job.nodes, STRAGGLER)
        busbw = self.busbw(job)
        hosts = job.nodes
        return nccl_output(busbw / 482.27, hosts) if job.instrument == "nccl-tests" else sweep_output(busbw, hosts)


STRAGGLER = "gpu042"


def simulated_document(count: int = 256) -> dict:
    """certification.json of a simulated fleet of `count` nodes (at least 4)."""
    nodes = fleet(count)
    hardware = Hardware(nodes[count // 2 - 11], nodes[-count // 5])
    judge = criteria.Criteria(thresholds=thresholds(None, "H100-SXM5-80GB", RANKS_PER_NODE, 400, None),
                              gradient_bytes=GRADIENT, fabric="ethernet", expect_gdr=False, warmup_steps=20)
    scheduler = Scheduler(nodes, ("communication", "training"), RANKS_PER_NODE, 3, ["--steps", "200"],
                          Limits(judge.thresholds.intra_node_gbps, judge.thresholds.inter_node_gbps,
                                 judge.variance_percent))
    runs, rounds = [], []
    started = 1_780_000_000.0
    clock = started
    while (round_ := scheduler.next_round()) is not None:
        outcomes = [hardware.outcome(job) for job in round_.jobs]
        scheduler.record(outcomes)
        took = 240.0 if round_.jobs[0].instrument == "train" else 45.0
        for job in round_.jobs:
            for repeat in range(1, job.repeats + 1):
                runs.append({"name": f"{job.name} #{repeat}", "instrument": job.instrument, "scope": job.scope,
                             "nodes": job.nodes, "repeat": repeat, "args": job.args, "round": len(rounds), "rc": 0,
                             "hung": False, "stdout": hardware.output(job), "stderr": ""})
        rounds.append({"name": round_.name, "kind": round_.kind, "start": _iso(clock), "end": _iso(clock + took),
                       "duration_s": took,
                       "jobs": [{"name": o.job.name, "instrument": o.job.instrument, "scope": o.job.scope,
                                 "nodes": o.job.nodes, "purpose": o.job.purpose, "runs": o.job.repeats,
                                 "status": o.status, "busbw_gbps": o.busbw_gbps, "named": o.named,
                                 "reason": o.reason, "stragglers": o.stragglers} for o in outcomes]})
        clock += took + 5
    localised = set(scheduler.blamed)
    checks, medians = criteria.communication_checks(runs, judge, localised)
    findings = [finding.as_dict() for finding in scheduler.findings]
    checks += criteria.finding_checks(findings, localised)
    trained = [run for run in runs if run["instrument"] == "train"]
    training_checks, training = criteria.training_checks(trained[-1], trained[-1]["nodes"], judge,
                                                         localised=localised)
    checks += training_checks
    verdicts = criteria.node_verdicts(checks, nodes, scheduler.blamed)
    return {
        "cluster": "sim", "inventory": "sim", "nodes": nodes, "started": _iso(started),
        "duration_s": clock - started, "certified": all(c.passed for c in checks), "interrupted": False,
        "parts": ["communication", "training"], "thresholds": {
            "intra_node_gbps": judge.thresholds.intra_node_gbps, "inter_node_gbps": judge.thresholds.inter_node_gbps,
            "source": judge.thresholds.source},
        "criteria": {"variance_percent": judge.variance_percent, "straggler_percent": judge.straggler_percent},
        "hang_timeout_s": 300, "fault_injected": False, "node_verdicts": verdicts,
        "checks": [check.as_dict() for check in checks], "medians_gbps": medians,
        "schedule": {"base_rounds": sum(r["kind"] == "base" for r in rounds),
                     "localise_rounds": sum(r["kind"] != "base" for r in rounds)},
        "rounds": rounds, "findings": findings, "localised": scheduler.blamed, "excluded": scheduler.excluded,
        "cpus": {}, "node_cpus": {}, "curves": criteria.measurement_curves(runs), "training": training,
        "trainings": [training], "nccl_versions": criteria.nccl_versions(runs),
        "jobs": [{k: r[k] for k in ("name", "instrument", "scope", "nodes", "round", "rc", "hung")} for r in runs],
        "raw_outputs": [],
    }


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
