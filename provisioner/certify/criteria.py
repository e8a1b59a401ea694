"""Criteria: each a named check with its threshold, a verdict, and the nodes it blames.

Single-node measurements blame their node. Who is to blame for a job of several nodes is the
schedule's word (its localisation rounds): `localised` names those nodes; a failing multi-node
check whose nodes localisation cleared blames none of them and fails the fleet only."""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from provisioner.certify.outputs import (
    CPUS_MARK,
    TRAIN_MARK,
    Refused,
    bucket_row,
    busbw,
    marked_objects,
    read_output,
    refusals,
    row_busbw,
    stragglers,
    wrong_values,
)
from provisioner.certify.profiles import Thresholds
from provisioner.certify.schedule import pair_reference
from provisioner.parsers.common import ParseError


@dataclass(frozen=True)
class Criteria:
    thresholds: Thresholds
    gradient_bytes: int
    variance_percent: float = 5.0
    step_time_cv_max: float = 0.05
    # None: the preset's own figure (the trainer reports it, scaled to the run's steps).
    loss_drop_min: float | None = None
    warmup_steps: int = 50
    fabric: str = "infiniband"
    expect_gdr: bool = True
    # DistributedDataParallel's bucket: the message size of a training step's all-reduces.
    bucket_bytes: int = 100 << 20
    # Floor at the bucket size, as a share of the gradient-size floor (smaller messages reach
    # less of the link: about 85 % inside an 8-GPU NVSwitch node at 128 MiB, 70 % across nodes).
    bucket_floor_share: float = 0.6
    # A rank whose median compute time per step is more than this share above the fleet's.
    straggler_percent: float = 10.0
    # Every node writing (reading) its part of the target checkpoint at once may take this long.
    checkpoint_save_max_s: float = 180.0
    checkpoint_load_max_s: float = 180.0


@dataclass
class Check:
    id: str
    name: str
    category: str  # communication | training
    passed: bool
    nodes: list[str]  # the nodes it covers; `blamed` are those it fails
    blamed: list[str] = field(default_factory=list)
    measured: float | str | None = None
    threshold: float | str | None = None
    unit: str = ""
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _label(scope: str, nodes: list[str]) -> str:
    return {"node": nodes[0], "all": "all nodes"}.get(scope, "+".join(nodes))


def _blamed(scope: str, nodes: list[str], localised: set[str]) -> list[str]:
    """A node alone is its own culprit; of several, those the localisation named."""
    return list(nodes) if scope == "node" else [node for node in nodes if node in localised]


# NCCL INFO lines: a channel's transport ("Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA")
# and the network plugin's own word that it found no device.
_CHANNEL_VIA = re.compile(r"\bChannel\s+\d+(?:/\d+)?\s*:.*?\bvia\s+(NET/\S+)")
_NO_IB_DEVICE = re.compile(r"NET/IB\s*:\s*No device found", re.IGNORECASE)


def _transport_problem(stdout: str, criteria: Criteria) -> str | None:
    """On InfiniBand, every network channel in NCCL's INFO log must run over IB (with
    GPUDirect RDMA where expected); a socket channel, or the IB plugin finding no device,
    fails. Channels inside a node (P2P, SHM, NVLS) are not network channels."""
    if _NO_IB_DEVICE.search(stdout):
        return "NCCL found no InfiniBand device (NET/IB : No device found)"
    channels = [match.group(1) for match in _CHANNEL_VIA.finditer(stdout)]
    sockets = [via for via in channels if via.startswith("NET/Socket")]
    if sockets:
        return f"{len(sockets)} of {len(channels)} network channels fell back to sockets (NET/Socket), not InfiniBand"
    if "NET/Socket" in stdout and "NET/IB" not in stdout:
        return "NCCL fell back to sockets (NET/Socket), not InfiniBand"
    if not channels:
        if "NET/IB" not in stdout:
            return "NCCL's log names no NET/IB transport (is NCCL_DEBUG=INFO reaching the job?)"
        return None  # IB in use, no network channel logged (every rank on one node)
    others = sorted({via.split("/")[1] for via in channels if not via.startswith("NET/IB")})
    if others:
        return f"network channels over {', '.join(others)}, not InfiniBand"
    if criteria.expect_gdr:
        without = [via for via in channels if "GDRDMA" not in via]
        if without:
            return f"{len(without)} of {len(channels)} InfiniBand channels without GPUDirect RDMA (no GDRDMA)"
    return None


def run_facts(run: dict[str, Any], instrument: str) -> dict[str, Any]:
    """The instrument's facts from a finished run; ParseError for a run that hung or failed
    (Refused where its ranks refused to run without a GPU)."""
    if run.get("hung"):
        raise ParseError(f"hung: {run.get('hung_detail') or 'no progress'}")
    if run["rc"] != 0:
        if found := refusals(run.get("stdout") or ""):
            raise Refused(found)
        raise ParseError(f"exit status {run['rc']}: {(run.get('stderr') or '').strip()[-300:]}")
    return read_output(instrument, run["stdout"])


def communication_checks(results: list[dict[str, Any]], criteria: Criteria,
                         localised: set[str] | None = None) -> tuple[list[Check], dict]:
    """Checks of the nccl-tests and sweep jobs; also returns the medians per measurement.
    localised: the nodes the schedule found at fault (None: every multi-node failure blames all
    its nodes, as where no localisation ran)."""
    checks: list[Check] = []
    grouped: dict[tuple[str, str, tuple[str, ...]], list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        if result["instrument"] in ("nccl-tests", "sweep"):
            grouped[(result["instrument"], result["scope"], tuple(result["nodes"]))].append(result)
    medians: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    for (instrument, scope, members), all_runs in grouped.items():
        runs, first = _last_measurement(all_runs, instrument, criteria.gradient_bytes)
        nodes, label = list(members), _label(scope, list(members))
        blamed = _blamed(scope, nodes, set(nodes) if localised is None else localised)
        prefix = f"{instrument}.{scope}.{'+'.join(members) if scope != 'all' else 'all'}"
        parsed, errors, refusing = [], [], set()
        for run in runs:
            try:
                parsed.append((run, run_facts(run, instrument)))
            except Refused as refusal:
                errors.append(f"{run['name']}: {refusal}")
                refusing.update(refusal.hosts)
            except (ParseError, ValueError, KeyError) as error:
                errors.append(f"{run['name']}: {error}")
        hung = [run for run in runs if run.get("hung")]
        checks.append(Check(f"{prefix}.ran", f"{instrument} ran ({label})", "communication", not errors, nodes,
                            (sorted(refusing) or blamed) if errors else [], detail="; ".join(errors)))
        for run in hung:
            named = list(run.get("hung_named") or [])
            checks.append(Check(f"{prefix}.hang", f"no rank hung ({instrument}, {label})", "communication", False,
                                nodes, named or blamed, detail=run.get("hung_detail", "")))
        if not parsed:
            continue
        values = [busbw(facts, instrument, criteria.gradient_bytes) for _, facts in parsed]
        median = statistics.median(values)
        medians[f"{instrument}.{scope}"][members] = median
        threshold = criteria.thresholds.intra_node_gbps if scope == "node" else criteria.thresholds.inter_node_gbps
        passed = median >= threshold
        checks.append(Check(f"{prefix}.busbw", f"{instrument} busbw at the gradient size ({label})", "communication",
                            passed, nodes, [] if passed else blamed, round(median, 3), threshold,
                            "GB/s", f"median of {len(values)}: {', '.join(f'{v:.3f}' for v in values)}{first}; "
                                    f"threshold from {criteria.thresholds.source}"))
        bucket_rows = [bucket_row(facts["rows"], criteria.bucket_bytes) for _, facts in parsed]
        bucket_values = [row_busbw(row, instrument) for row in bucket_rows]
        bucket_median = statistics.median(bucket_values)
        bucket_floor = round(threshold * criteria.bucket_floor_share, 3)
        bucket_passed = bucket_median >= bucket_floor
        checks.append(Check(f"{prefix}.busbw_bucket", f"{instrument} busbw at the DDP bucket size ({label})",
                            "communication", bucket_passed, nodes, [] if bucket_passed else blamed,
                            round(bucket_median, 3), bucket_floor,
                            "GB/s", f"{bucket_rows[0]['size_bytes']} B messages (bucket "
                                    f"{criteria.bucket_bytes} B); median of {len(bucket_values)}: "
                                    f"{', '.join(f'{v:.3f}' for v in bucket_values)}; floor "
                                    f"{criteria.bucket_floor_share:.0%} of the gradient-size threshold"))
        wrong = sum(wrong_values(facts, instrument) for _, facts in parsed)
        checks.append(Check(f"{prefix}.data", f"{instrument} results correct ({label})", "communication",
                            wrong == 0, nodes, [] if wrong == 0 else blamed, wrong, 0, "wrong values",
                            "data check: wrong elements and out-of-bounds values over every size and repeat"))
        if instrument == "nccl-tests" and criteria.fabric == "infiniband" and scope != "node":
            problems = {p for run, _ in parsed if (p := _transport_problem(run["stdout"], criteria))}
            checks.append(Check(f"{prefix}.transport", f"NCCL uses InfiniBand ({label})", "communication",
                                not problems, nodes, [] if not problems else blamed,
                                detail="; ".join(sorted(problems)) or "NET/IB" + (" with GDRDMA"
                                                                                    if criteria.expect_gdr else "")))
    checks.extend(_variance_checks(medians, criteria))
    return checks, {key: {"+".join(k): v for k, v in value.items()} for key, value in medians.items()}


def _last_measurement(runs: list[dict[str, Any]], instrument: str,
                      gradient_bytes: int) -> tuple[list[dict[str, Any]], str]:
    """The runs of a job's last round, and what its first measured where the schedule measured
    it again (a node slow alone is measured once more before it is named): the last is the figure."""
    rounds = sorted({run.get("round", 0) for run in runs})
    if len(rounds) < 2:
        return runs, ""
    earlier = []
    for run in runs:
        if run.get("round", 0) == rounds[0]:
            try:
                earlier.append(busbw(run_facts(run, instrument), instrument, gradient_bytes))
            except (ParseError, ValueError, KeyError):
                continue
    first = f"; measured again, the first time {statistics.median(earlier):.3f}" if earlier else ""
    return [run for run in runs if run.get("round", 0) == rounds[-1]], first


def _variance_checks(medians: dict[str, dict[tuple[str, ...], float]], criteria: Criteria) -> list[Check]:
    """Every node's and every pair's busbw within the allowed share below the fleet median. A
    slow pair blames neither node here: which one is at fault is the localisation's finding."""
    checks = []
    allowed = criteria.variance_percent / 100
    reference_text = {"node": "fleet median", "pair": "a sound pair (median of each node's best pair)"}
    for instrument in ("nccl-tests", "sweep"):
        per_node = {members[0]: value for members, value in medians.get(f"{instrument}.node", {}).items()}
        pairs = {"+".join(m): v for m, v in medians.get(f"{instrument}.pair", {}).items()}
        for kind, values in (("node", per_node), ("pair", pairs)):
            if len(values) < 2:
                continue
            fleet = statistics.median(values.values()) if kind == "node" else pair_reference(
                [(subject.split("+"), value) for subject, value in values.items()])
            floor = fleet * (1 - allowed)
            for subject, value in sorted(values.items()):
                deficit = (fleet - value) / fleet * 100 if fleet else 0.0
                passed = value >= floor
                members = subject.split("+")
                what = ("intra-node busbw", "the fleet median") if kind == "node" else ("pair busbw", "a sound pair")
                checks.append(Check(f"{instrument}.variance.{kind}.{subject}",
                                    f"{instrument} {what[0]} of {subject} within {criteria.variance_percent:g}% of "
                                    f"{what[1]}", "communication", passed, members,
                                    [] if passed or kind == "pair" else members, round(value, 3), round(floor, 3),
                                    "GB/s", f"{reference_text[kind]} {fleet:.3f} GB/s; {deficit:+.1f}% below it"))
    return checks


def finding_checks(findings: list[dict[str, Any]], localised: set[str]) -> list[Check]:
    """The localisation's conclusions as checks: a node named, a link, a group that fails only
    together, a failure of scale, a suspect that could not be compared."""
    checks = []
    for finding in findings:
        kind, nodes, instrument = finding["kind"], list(finding["nodes"]), finding["instrument"]
        if finding.get("scope") in ("node", "straggler", "job"):
            continue  # the node's own measurement, the straggler check, the job's checks say it already
        subject = "+".join(nodes) if kind != "scale" else "all"
        names = {"node": f"{'+'.join(nodes)} located by the rounds ({instrument})",
                 "link": f"path between {' and '.join(nodes)} ({instrument})",
                 "group": f"{'+'.join(nodes)} fail together ({instrument})",
                 "scale": f"{instrument} at full scale",
                 "unresolved": f"{'+'.join(nodes)}: suspect, no known-good partner ({instrument})"}
        checks.append(Check(f"{instrument}.localised.{kind}.{subject}", names.get(kind, kind), "localisation", False,
                            nodes,
                            [node for node in nodes if node in localised], detail=finding["how"]))
    return checks


def cpu_checks(results: list[dict[str, Any]], nodes: list[str], ranks_per_node: int,
               node_cpus: dict[str, int]) -> tuple[list[Check], dict[str, dict[str, Any]]]:
    """Every rank has its share of its node's CPUs (the node's Slurm CPUs divided by its ranks):
    a job whose tasks got one CPU each would run eight ranks, their NCCL proxy threads and data
    loading on one core. Also returns, per node, its CPUs and the rank that had the fewest."""
    seen: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        records: list[dict[str, Any]] = []
        if result["instrument"] == "nccl-tests":
            records = marked_objects(result.get("stdout") or "", CPUS_MARK, strict=False)
        elif result.get("rc") == 0:
            try:
                facts = read_output(result["instrument"], result["stdout"])
            except (ParseError, ValueError, KeyError):
                continue
            records = [r for r in (facts.get("rank_cpus") if result["instrument"] == "sweep" else facts.get("ranks"))
                       or [] if r and "cpus" in r]
        for record in records:
            seen[str(record.get("host"))].append({"job": result["name"], "rank": record.get("rank"),
                                                  "cpus": record.get("cpus"), "cpu_list": record.get("cpu_list"),
                                                  "node_cpus": record.get("node_cpus")})
    checks = []
    summary: dict[str, dict[str, Any]] = {}
    for node in nodes:
        records = seen.get(node)
        if not records:
            continue
        total = node_cpus.get(node) or max(int(r.get("node_cpus") or 0) for r in records)
        needed = max(1, total // max(1, ranks_per_node))
        fewest = min(records, key=lambda r: int(r.get("cpus") or 0))
        passed = int(fewest.get("cpus") or 0) >= needed
        summary[node] = {"node_cpus": total, "needed_per_rank": needed, "ranks_seen": len(records),
                         "fewest": fewest}
        checks.append(Check(f"cpus.{node}", f"ranks have their CPUs ({node})", "communication", passed, [node],
                            [] if passed else [node], int(fewest.get("cpus") or 0), needed, "CPUs",
                            f"{total} CPUs for {ranks_per_node} ranks; fewest: {fewest['job']} rank {fewest['rank']} "
                            f"on CPUs {fewest.get('cpu_list')}"))
    return checks, summary


def training_checks(result: dict[str, Any] | None, nodes: list[str], criteria: Criteria,
                    prefix: str = "training", title: str = "smoke training",
                    localised: set[str] | None = None) -> tuple[list[Check], dict]:
    """Checks of a smoke training: it ran (no rank hung or refused), loss finite and falling,
    steady steps, no straggler, identical ranks."""
    if result is None:
        return [], {}
    blamed_on_failure = list(nodes) if localised is None else [n for n in nodes if n in localised] or list(nodes)
    try:
        if result.get("hung"):
            named = list(result.get("hung_named") or [])
            return [Check(f"{prefix}.ran", f"{title} ran", "training", False, nodes, named or blamed_on_failure,
                          detail=f"hung: {result.get('hung_detail') or 'no progress'}"),
                    Check(f"{prefix}.hang", f"no rank hung ({title})", "training", False, nodes,
                          named or blamed_on_failure, detail=result.get("hung_detail", ""))], {}
        if result["rc"] != 0 and TRAIN_MARK not in result.get("stdout", ""):
            if found := refusals(result["stdout"]):
                raise Refused(found)
            raise ParseError(f"exit status {result['rc']}: {(result.get('stderr') or '').strip()[-400:]}")
        facts = read_output("train", result["stdout"])
    except Refused as refusal:
        return [Check(f"{prefix}.ran", f"{title} ran", "training", False, nodes, refusal.hosts,
                      detail=str(refusal))], {}
    except (ParseError, ValueError, KeyError) as error:
        return [Check(f"{prefix}.ran", f"{title} ran", "training", False, nodes, blamed_on_failure,
                      detail=str(error))], {}
    ranks = facts["ranks"]
    checks = [Check(f"{prefix}.ran", f"{title} ran", "training", True, nodes,
                    detail=f"{facts['world']} ranks, preset {facts['preset']}, backend {facts['backend']}")]
    violation = facts["violation"]
    steps_done = facts["steps_done"]
    mean_loss = facts["series"]["mean_loss"]
    finite = all(math.isfinite(v) for v in mean_loss)
    blamed = sorted(set(violation["hosts"])) if violation and violation["check"] == "loss_finite" else []
    checks.append(Check(f"{prefix}.loss_finite", "loss finite on every rank", "training", finite and not blamed,
                        nodes, blamed, detail=f"first non-finite loss at step {violation['step']} on ranks "
                                              f"{violation['ranks']}" if blamed else f"{steps_done} steps"))
    infinite = violation if violation and violation["check"] == "grad_norm_finite" else None
    checks.append(Check(f"{prefix}.grad_norm_finite", "gradient norm finite on every rank", "training",
                        infinite is None, nodes, sorted(set(infinite["hosts"])) if infinite else [],
                        detail=(f"step {infinite['step']}: non-finite gradient norm on ranks {infinite['ranks']} "
                                f"({', '.join(sorted(set(infinite['hosts'])))}): norms {infinite['norms']}")
                        if infinite else f"checked every step of {steps_done}"))
    grad = violation if violation and violation["check"] == "grad_norm_consistency" else None
    checks.append(Check(f"{prefix}.grad_norm_consistency", "global gradient norm identical on every rank",
                        "training", grad is None, nodes, sorted(set(grad["hosts"])) if grad else [],
                        measured=(max(grad["norms"]) - min(grad["norms"])) if grad else 0.0, threshold=0.0,
                        detail=(f"step {grad['step']}: ranks {grad['ranks']} on "
                                f"{', '.join(sorted(set(grad['hosts'])))} differ (norms {grad['norms']}): "
                                "silent data corruption suspect") if grad else f"checked every step of {steps_done}"))
    completed = steps_done >= facts["steps_requested"]
    head = statistics.fmean(mean_loss[: min(10, len(mean_loss))])
    tail_length = max(1, len(mean_loss) // 10)
    tail = statistics.fmean(mean_loss[-tail_length:])
    drop_min = criteria.loss_drop_min if criteria.loss_drop_min is not None else facts.get("loss_drop_min", 0.5)
    limit = head * (1 - drop_min)
    falls = completed and tail <= limit
    checks.append(Check(f"{prefix}.loss_decrease", f"loss falls by at least {drop_min:.0%}", "training",
                        falls, nodes, [], round(tail, 4), round(limit, 4), "loss",
                        f"initial {head:.4f} (first 10 steps), final {tail:.4f} (last {tail_length} steps); "
                        + ("the inventory's" if criteria.loss_drop_min is not None else
                           f"preset {facts['preset']}'s figure for {facts['steps_requested']} steps")
                        + ("" if completed else f"; stopped at step {steps_done} of {facts['steps_requested']}")))
    warmup = min(criteria.warmup_steps, steps_done // 5)
    step_times = facts["series"]["step_time_s"][warmup:]
    by_compute = sorted(ranks, key=lambda r: r.get("compute_median_s") or 0.0)
    slowest = by_compute[-1] if by_compute else None
    if len(step_times) >= 2:
        cv = statistics.pstdev(step_times) / statistics.fmean(step_times)
        passed = cv <= criteria.step_time_cv_max
        slow_text = (f"; slowest rank {slowest['rank']} on {slowest['host']} (median compute "
                     f"{(slowest.get('compute_median_s') or 0) * 1000:.1f} ms)") if slowest else ""
        checks.append(Check(f"{prefix}.step_time_cv", "step time steady after warm-up", "training", passed, nodes,
                            [] if passed or not slowest else [slowest["host"]], round(cv, 4),
                            criteria.step_time_cv_max, "CV",
                            f"{len(step_times)} steps after {warmup} warm-up; mean "
                            f"{statistics.fmean(step_times) * 1000:.1f} ms{slow_text}"))
    slow = stragglers(facts, criteria.straggler_percent)
    fleet = statistics.median(r["compute_median_s"] for r in ranks if r.get("compute_median_s")) \
        if any(r.get("compute_median_s") for r in ranks) else 0.0
    checks.append(Check(f"{prefix}.straggler", f"no rank computes more than {criteria.straggler_percent:g}% slower "
                        "than the median", "training", not slow, nodes, sorted({s["host"] for s in slow}),
                        round(max((s["above_percent"] for s in slow), default=0.0), 1), criteria.straggler_percent,
                        "% above the median",
                        "; ".join(f"rank {s['rank']} on {s['host']}: {s['compute_median_s'] * 1000:.1f} ms per step "
                                  f"({s['above_percent']:.0f}% above)" for s in slow)
                        or f"median compute {fleet * 1000:.1f} ms per step over {len(ranks)} ranks "
                           "(forward and backward to the last gradient bucket, waits apart)"))
    sums = facts["parameter_checksums"]
    majority = statistics.mode(sums)
    odd = [rank for rank, value in enumerate(sums) if value != majority]
    hosts = facts.get("hosts") or [r["host"] for r in ranks]
    checks.append(Check(f"{prefix}.parameter_checksum", "parameters identical on every rank at the end", "training",
                        not odd, nodes, sorted({hosts[r] for r in odd if r < len(hosts)}), len(set(sums)), 1,
                        "distinct checksums", f"ranks {odd} differ" if odd else f"checksum {majority!r}"))
    summary = {"nodes": list(nodes), "ranks": facts["world"], "steps_done": steps_done,
               "steps_requested": facts["steps_requested"], "preset": facts["preset"], "backend": facts["backend"],
               "bf16": facts["bf16"], "parameters": facts["parameters"],
               "tokens_per_second": facts["tokens_per_second"], "mfu": facts["mfu"],
               "peak_tflops": facts.get("peak_tflops"), "device_name": facts.get("device_name"),
               "loss_drop_min": drop_min,
               "torch_nccl_version": next((r.get("nccl_version") for r in ranks if r.get("nccl_version")), None),
               "elapsed_s": facts["elapsed_s"], "violation": violation, "fault_injected": facts["fault_injected"],
               "mean_loss": mean_loss, "grad_norm": facts["series"].get("grad_norm") or [],
               "step_time_s": step_times, "hosts_by_rank": hosts,
               "rank_compute": [{"rank": r["rank"], "host": r["host"], "compute_median_s": r.get("compute_median_s"),
                                 "compute_p90_s": r.get("compute_p90_s"), "wait_median_s": r.get("wait_median_s"),
                                 "cpus": r.get("cpus"), "cpu_list": r.get("cpu_list")} for r in ranks],
               "stragglers": slow}
    return checks, summary



def nccl_versions(results: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The NCCL each node ran, per node: the system library (nccl-tests) and torch's own (the trainer)."""
    system: dict[str, str] = {}
    torch_nccl: dict[str, str] = {}
    for result in results:
        if result.get("rc") != 0 or result.get("hung"):
            continue
        try:
            facts = read_output(result["instrument"], result["stdout"])
        except (ParseError, ValueError, KeyError):
            continue
        if result["instrument"] == "nccl-tests" and facts.get("nccl_version"):
            system.update(dict.fromkeys(result["nodes"], facts["nccl_version"]))
        elif result["instrument"] == "train":
            torch_nccl.update({rank["host"]: rank["nccl_version"] for rank in facts["ranks"]
                               if rank and rank.get("nccl_version")})
    return {"system": dict(sorted(system.items())), "torch": dict(sorted(torch_nccl.items()))}


def _same(a: float, b: float, tolerance: float) -> bool:
    if tolerance == 0:
        return a == b
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-30)


def resume_checks(reference: dict[str, Any], resumed: dict[str, Any], tolerance: float = 0.0,
                  prefix: str = "training.resume") -> tuple[list[Check], dict[str, Any]]:
    """A training resumed from the checkpoint the reference run saved after k steps against the
    reference's own steps k+1..: every rank's loaded state equal to what it saved (each rank
    compared its own; a rank that differs is named with its host and first differing tensor),
    the same losses and global gradient norms step by step, the same parameters at the end.
    tolerance 0: bitwise (CPU, gloo)."""
    saved_at = int(reference.get("saved_at") or 0)
    hosts = list(resumed.get("hosts") or [])
    nodes = sorted(set(hosts) | set(reference.get("hosts") or []))
    checks: list[Check] = []
    state = resumed.get("resume_state") or {}
    differing = {int(entry["rank"]): (str(entry["host"]), str(entry["tensor"])) for entry in state.get("differing", [])}
    culprits = sorted({host for host, _ in differing.values()})
    detail = "; ".join(f"rank {rank} on {host}: {tensor} differs" for rank, (host, tensor) in sorted(differing.items()))
    state_known = int(state.get("ranks_compared") or 0) == len(hosts) > 0
    checks.append(Check(f"{prefix}.state", f"resumed state identical to the saved one on every rank (step {saved_at})",
                        "training", state_known and not differing, nodes, culprits,
                        len(differing), 0, "ranks differing",
                        detail or ("every tensor of the model and the optimizer, on each rank" if state_known else
                                   "the resumed run compared no state")))
    steps = len(resumed["series"]["mean_loss"])
    curves: dict[str, Any] = {"saved_at": saved_at, "steps": steps}
    for series, label in (("mean_loss", "losses"), ("grad_norm", "global gradient norms")):
        expected = reference["series"][series][saved_at:saved_at + steps]
        found = resumed["series"][series]
        first = next((i for i, (a, b) in enumerate(zip(expected, found, strict=False)) if not _same(a, b, tolerance)),
                     None if len(expected) == len(found) else min(len(expected), len(found)))
        curves[f"reference_{series}"], curves[f"resumed_{series}"] = expected, found
        passed = first is None and steps > 0
        checks.append(Check(f"{prefix}.{series}", f"resumed {label} of steps {saved_at + 1}-{saved_at + steps} "
                            f"{'identical to' if tolerance == 0 else 'within tolerance of'} the run that went on",
                            "training", passed, nodes, [] if passed else culprits,
                            None if first is None else saved_at + first + 1, None, "first differing step",
                            "" if first is None or first >= min(len(expected), len(found)) else
                            f"step {saved_at + first + 1}: {found[first]!r} resumed, {expected[first]!r} going on"))
    end_reference, end_resumed = reference.get("parameter_checksums") or [], resumed.get("parameter_checksums") or []
    ranks = [rank for rank, (a, b) in enumerate(zip(end_reference, end_resumed, strict=False))
             if not _same(a, b, tolerance)]
    same_end = bool(end_reference) and len(end_reference) == len(end_resumed) and not ranks
    checks.append(Check(f"{prefix}.parameters", "parameters at the end identical to the run that went on", "training",
                        same_end, nodes, [] if same_end else culprits, len(ranks), 0, "ranks differing",
                        ", ".join(f"rank {rank} on {hosts[rank] if rank < len(hosts) else '?'}" for rank in ranks)))
    curves.update({"tolerance": tolerance, "differing_ranks": {str(rank): {"host": host, "tensor": tensor}
                                                                for rank, (host, tensor) in differing.items()},
                   "reference_hosts": reference.get("hosts"), "resumed_hosts": hosts})
    return checks, curves


def storage_checks(results: list[dict[str, Any]], criteria: Criteria, target: dict[str, Any],
                   interval_s: float) -> tuple[list[Check], dict[str, Any]]:
    """Each node wrote and read its part of the target checkpoint; each within the variance
    allowed below the fleet median (the slow node named); the checkpoint's save and load (every
    node at once: the slowest node ends them) within their limits. The summary for the report."""
    checks: list[Check] = []
    measured: dict[str, dict[str, Any]] = {}
    for result in results:
        if result["instrument"] != "storage":
            continue
        node = result["nodes"][0]
        try:
            facts = run_facts(result, "storage")
        except (ParseError, ValueError, KeyError) as error:
            checks.append(Check(f"storage.ran.{node}", f"checkpoint write and read on {node}", "storage", False,
                                [node], [node], detail=str(error)))
            continue
        measured[node] = {"write_gbps": round(facts["write"]["gbps"], 4), "read_gbps": round(facts["read"]["gbps"], 4),
                          "write_s": round(facts["write"]["seconds"], 3), "read_s": round(facts["read"]["seconds"], 3),
                          "bytes": facts["write"]["bytes"], "ranks": facts["write"]["ranks"],
                          "fio_write_gbps": round(facts["write"]["fio_gbps"], 4),
                          "fio_read_gbps": round(facts["read"]["fio_gbps"], 4), "direct": facts["write"]["direct"]}
    if not measured and not checks:
        return [], {}
    allowed = criteria.variance_percent / 100
    for direction in ("write", "read"):
        values = {node: figures[f"{direction}_gbps"] for node, figures in measured.items()}
        if len(values) < 2:
            continue
        fleet = statistics.median(values.values())
        floor = fleet * (1 - allowed)
        for node, value in sorted(values.items()):
            passed = value >= floor
            checks.append(Check(f"storage.variance.{direction}.{node}",
                                f"checkpoint {direction} of {node} within {criteria.variance_percent:g}% of the fleet "
                                "median", "storage", passed, [node], [] if passed else [node], value,
                                round(floor, 4), "GB/s", f"fleet median {fleet:.4g} GB/s; "
                                f"{(fleet - value) / fleet * 100 if fleet else 0:+.1f}% below it"))
    summary: dict[str, Any] = {"checkpoint": target, "nodes": measured, "interval_s": interval_s,
                               "save_max_s": criteria.checkpoint_save_max_s,
                               "load_max_s": criteria.checkpoint_load_max_s}
    if measured:
        save_s = max(figures["write_s"] for figures in measured.values())
        load_s = max(figures["read_s"] for figures in measured.values())
        slowest = {"save": max(measured, key=lambda node: measured[node]["write_s"]),
                   "load": max(measured, key=lambda node: measured[node]["read_s"])}
        for name, seconds, limit in (("save", save_s, criteria.checkpoint_save_max_s),
                                     ("load", load_s, criteria.checkpoint_load_max_s)):
            checks.append(Check(f"storage.{name}", f"checkpoint {name} on every node at once within {limit:g} s",
                                "storage", seconds <= limit, sorted(measured), [], round(seconds, 3), limit, "s",
                                f"{target['model']} checkpoint, {target['shard_bytes'] / 1e6:.4g} MB per rank; the "
                                f"slowest node, {slowest[name]}, took {seconds:.3g} s"))
        summary.update({"save_s": save_s, "load_s": load_s,
                        "overhead_at_interval": save_s / (interval_s + save_s)})
    return checks, summary


def node_verdicts(checks: list[Check], nodes: list[str],
                  localised: dict[str, list[str]] | None = None) -> dict[str, dict[str, Any]]:
    """Per node: failed if any check blames it, with those checks' ids; a node the schedule
    named without a check to say so fails with its reason."""
    verdicts = {}
    for node in nodes:
        failed = [check.id for check in checks if not check.passed and node in check.blamed]
        if not failed and node in (localised or {}):
            failed = [f"schedule: {why}" for why in localised[node]]
        verdicts[node] = {"certified": not failed, "failed_checks": failed}
    return verdicts


def measurement_curves(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """busbw per message size of every measurement (median over its repeats), for the report's plots."""
    grouped: dict[tuple[str, str, tuple[str, ...]], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        instrument = result["instrument"]
        if instrument not in ("nccl-tests", "sweep") or result["rc"] != 0 or result.get("hung"):
            continue
        try:
            facts = read_output(instrument, result["stdout"])
        except (ParseError, ValueError, KeyError):
            continue
        for row in facts["rows"]:
            value = row["out_of_place"]["busbw_gbps"] if instrument == "nccl-tests" else row["busbw_gbps"]
            if value is not None:
                grouped[(instrument, result["scope"], tuple(result["nodes"]))][row["size_bytes"]].append(value)
    return [{"instrument": instrument, "scope": scope, "nodes": list(members),
             "sizes_bytes": sorted(sizes), "busbw_gbps": [statistics.median(sizes[s]) for s in sorted(sizes)]}
            for (instrument, scope, members), sizes in grouped.items()]
