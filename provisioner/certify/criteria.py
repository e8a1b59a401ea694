"""Criteria: each a named check with its threshold, a verdict, and the nodes it blames."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner.certify.jobs import Refused, read_output, refusals
from provisioner.certify.profiles import Thresholds
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


def _gradient_row(rows: list[dict[str, Any]], gradient_bytes: int) -> dict[str, Any]:
    """The row at the gradient size, else the largest measured (nccl-tests may reduce maxBytes)."""
    exact = [row for row in rows if row["size_bytes"] == gradient_bytes]
    return exact[0] if exact else max(rows, key=lambda row: row["size_bytes"])


def _bucket_row(rows: list[dict[str, Any]], bucket_bytes: int) -> dict[str, Any]:
    """The smallest measured size at least the bucket size, else the largest measured."""
    above = [row for row in rows if row["size_bytes"] >= bucket_bytes]
    return min(above, key=lambda row: row["size_bytes"]) if above else max(rows, key=lambda row: row["size_bytes"])


def _row_busbw(row: dict[str, Any], instrument: str) -> float:
    return row["out_of_place"]["busbw_gbps"] if instrument == "nccl-tests" else row["busbw_gbps"]


def _busbw(facts: dict[str, Any], instrument: str, gradient_bytes: int) -> float:
    return _row_busbw(_gradient_row(facts["rows"], gradient_bytes), instrument)


def _wrong(facts: dict[str, Any], instrument: str) -> int:
    if instrument == "nccl-tests":
        values = [row[place]["wrong"] for row in facts["rows"] for place in ("out_of_place", "in_place")]
        return sum(v for v in values if v) + int(facts.get("out_of_bounds") or 0)
    return sum(row["wrong"] or 0 for row in facts["rows"])


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


def communication_checks(results: list[dict[str, Any]], criteria: Criteria) -> tuple[list[Check], dict]:
    """Checks of the nccl-tests and sweep jobs; also returns the medians per measurement."""
    checks: list[Check] = []
    grouped: dict[tuple[str, str, tuple[str, ...]], list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        if result["instrument"] in ("nccl-tests", "sweep"):
            grouped[(result["instrument"], result["scope"], tuple(result["nodes"]))].append(result)
    medians: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    for (instrument, scope, members), runs in grouped.items():
        nodes, label = list(members), _label(scope, list(members))
        prefix = f"{instrument}.{scope}.{'+'.join(members) if scope != 'all' else 'all'}"
        parsed, errors, refusing = [], [], set()
        for run in runs:
            try:
                if run["rc"] != 0:
                    if found := refusals(run["stdout"]):
                        raise Refused(found)
                    raise ParseError(f"exit status {run['rc']}: {(run.get('stderr') or '').strip()[-300:]}")
                parsed.append((run, read_output(instrument, run["stdout"])))
            except Refused as refusal:
                errors.append(f"{run['name']}: {refusal}")
                refusing.update(refusal.hosts)
            except (ParseError, ValueError, KeyError) as error:
                errors.append(f"{run['name']}: {error}")
        checks.append(Check(f"{prefix}.ran", f"{instrument} ran ({label})", "communication", not errors, nodes,
                            (sorted(refusing) or nodes) if errors else [], detail="; ".join(errors)))
        if not parsed:
            continue
        values = [_busbw(facts, instrument, criteria.gradient_bytes) for _, facts in parsed]
        median = statistics.median(values)
        medians[f"{instrument}.{scope}"][members] = median
        threshold = criteria.thresholds.intra_node_gbps if scope == "node" else criteria.thresholds.inter_node_gbps
        passed = median >= threshold
        checks.append(Check(f"{prefix}.busbw", f"{instrument} busbw at the gradient size ({label})", "communication",
                            passed, nodes, [] if passed or scope == "all" else nodes, round(median, 3), threshold,
                            "GB/s", f"median of {len(values)}: {', '.join(f'{v:.3f}' for v in values)}; "
                                    f"threshold from {criteria.thresholds.source}"))
        bucket_rows = [_bucket_row(facts["rows"], criteria.bucket_bytes) for _, facts in parsed]
        bucket_values = [_row_busbw(row, instrument) for row in bucket_rows]
        bucket_median = statistics.median(bucket_values)
        bucket_floor = round(threshold * criteria.bucket_floor_share, 3)
        bucket_passed = bucket_median >= bucket_floor
        checks.append(Check(f"{prefix}.busbw_bucket", f"{instrument} busbw at the DDP bucket size ({label})",
                            "communication", bucket_passed, nodes,
                            [] if bucket_passed or scope == "all" else nodes, round(bucket_median, 3), bucket_floor,
                            "GB/s", f"{bucket_rows[0]['size_bytes']} B messages (bucket "
                                    f"{criteria.bucket_bytes} B); median of {len(bucket_values)}: "
                                    f"{', '.join(f'{v:.3f}' for v in bucket_values)}; floor "
                                    f"{criteria.bucket_floor_share:.0%} of the gradient-size threshold"))
        wrong = sum(_wrong(facts, instrument) for _, facts in parsed)
        checks.append(Check(f"{prefix}.data", f"{instrument} results correct ({label})", "communication",
                            wrong == 0, nodes, [] if wrong == 0 else nodes, wrong, 0, "wrong values",
                            "data check: wrong elements and out-of-bounds values over every size and repeat"))
        if instrument == "nccl-tests" and criteria.fabric == "infiniband" and scope != "node":
            problems = {p for run, _ in parsed if (p := _transport_problem(run["stdout"], criteria))}
            checks.append(Check(f"{prefix}.transport", f"NCCL uses InfiniBand ({label})", "communication",
                                not problems, nodes, [] if not problems else nodes,
                                detail="; ".join(sorted(problems)) or "NET/IB" + (" with GDRDMA"
                                                                                    if criteria.expect_gdr else "")))
    checks.extend(_variance_checks(medians, criteria))
    return checks, {key: {"+".join(k): v for k, v in value.items()} for key, value in medians.items()}


def _variance_checks(medians: dict[str, dict[tuple[str, ...], float]], criteria: Criteria) -> list[Check]:
    """Every node's and every pair's busbw within the allowed share below the fleet median."""
    checks = []
    allowed = criteria.variance_percent / 100
    for instrument in ("nccl-tests", "sweep"):
        per_node = {members[0]: value for members, value in medians.get(f"{instrument}.node", {}).items()}
        pairs = medians.get(f"{instrument}.pair", {})
        # A node's inter-node score: the median busbw of the pairs it is part of.
        pair_scores = {node: statistics.median(v for m, v in pairs.items() if node in m)
                       for node in {n for m in pairs for n in m}}
        for kind, values in (("node", per_node), ("pair", {"+".join(m): v for m, v in pairs.items()}),
                             ("pair-node", pair_scores)):
            if len(values) < 2:
                continue
            fleet = statistics.median(values.values())
            floor = fleet * (1 - allowed)
            for subject, value in sorted(values.items()):
                deficit = (fleet - value) / fleet * 100 if fleet else 0.0
                passed = value >= floor
                what = {"node": "intra-node busbw", "pair": "pair busbw",
                        "pair-node": "busbw of its pairs (median)"}[kind]
                members = subject.split("+")
                checks.append(Check(f"{instrument}.variance.{kind}.{subject}",
                                    f"{instrument} {what} of {subject} within {criteria.variance_percent:g}% of the "
                                    "fleet median", "communication", passed, members,
                                    [] if passed or kind == "pair" else members, round(value, 3), round(floor, 3),
                                    "GB/s", f"fleet median {fleet:.3f} GB/s; {deficit:+.1f}% below it"))
    return checks


def _rank_host(ranks: list[dict[str, Any]], rank: int) -> str:
    return ranks[rank]["host"] if rank < len(ranks) else f"rank {rank}"


def training_checks(result: dict[str, Any] | None, nodes: list[str], criteria: Criteria) -> tuple[list[Check], dict]:
    """Checks of the smoke training: it ran, loss finite and falling, steady steps, identical ranks."""
    if result is None:
        return [], {}
    try:
        if result["rc"] != 0 and _no_train_output(result):
            if found := refusals(result["stdout"]):
                raise Refused(found)
            raise ParseError(f"exit status {result['rc']}: {(result.get('stderr') or '').strip()[-400:]}")
        ranks = read_output("train", result["stdout"])["ranks"]
    except Refused as refusal:
        return [Check("training.ran", "smoke training ran", "training", False, nodes, refusal.hosts,
                      detail=str(refusal))], {}
    except (ParseError, ValueError, KeyError) as error:
        return [Check("training.ran", "smoke training ran", "training", False, nodes, nodes, detail=str(error))], {}
    checks = [Check("training.ran", "smoke training ran", "training", True, nodes,
                    detail=f"{len(ranks)} ranks, preset {ranks[0]['preset']}, backend {ranks[0]['backend']}")]
    violation = ranks[0]["violation"]
    steps_done = ranks[0]["steps_done"]
    losses = [[*r["records"]["loss"]] for r in ranks]
    mean_loss = [statistics.fmean(step) for step in zip(*losses, strict=False)]
    finite = all(math.isfinite(v) for per_rank in losses for v in per_rank)
    blamed = sorted(set(violation["hosts"])) if violation and violation["check"] == "loss_finite" else []
    checks.append(Check("training.loss_finite", "loss finite on every rank", "training", finite and not blamed,
                        nodes, blamed, detail=f"first non-finite loss at step {violation['step']} on ranks "
                                              f"{violation['ranks']}" if blamed else f"{steps_done} steps"))
    infinite = violation if violation and violation["check"] == "grad_norm_finite" else None
    checks.append(Check("training.grad_norm_finite", "gradient norm finite on every rank", "training",
                        infinite is None, nodes, sorted(set(infinite["hosts"])) if infinite else [],
                        detail=(f"step {infinite['step']}: non-finite gradient norm on ranks {infinite['ranks']} "
                                f"({', '.join(sorted(set(infinite['hosts'])))}): norms {infinite['norms']}")
                        if infinite else f"checked every step of {steps_done}"))
    grad = violation if violation and violation["check"] == "grad_norm_consistency" else None
    checks.append(Check("training.grad_norm_consistency", "global gradient norm identical on every rank", "training",
                        grad is None, nodes, sorted(set(grad["hosts"])) if grad else [],
                        measured=(max(grad["norms"]) - min(grad["norms"])) if grad else 0.0, threshold=0.0,
                        detail=(f"step {grad['step']}: ranks {grad['ranks']} on "
                                f"{', '.join(sorted(set(grad['hosts'])))} differ (norms {grad['norms']}): "
                                "silent data corruption suspect") if grad else f"checked every step of {steps_done}"))
    completed = steps_done >= ranks[0]["steps_requested"]
    head = statistics.fmean(mean_loss[: min(10, len(mean_loss))])
    tail_length = max(1, len(mean_loss) // 10)
    tail = statistics.fmean(mean_loss[-tail_length:])
    drop_min = criteria.loss_drop_min if criteria.loss_drop_min is not None else ranks[0].get("loss_drop_min", 0.5)
    limit = head * (1 - drop_min)
    falls = completed and tail <= limit
    checks.append(Check("training.loss_decrease", f"loss falls by at least {drop_min:.0%}", "training",
                        falls, nodes, [], round(tail, 4), round(limit, 4), "loss",
                        f"initial {head:.4f} (first 10 steps), final {tail:.4f} (last {tail_length} steps); "
                        + ("the inventory's" if criteria.loss_drop_min is not None else
                           f"preset {ranks[0]['preset']}'s figure for {ranks[0]['steps_requested']} steps")
                        + ("" if completed else f"; stopped at step {steps_done} of {ranks[0]['steps_requested']}")))
    warmup = min(criteria.warmup_steps, steps_done // 5)
    step_times = [max(step) for step in zip(*(r["records"]["step_time_s"][warmup:] for r in ranks), strict=False)]
    forward = {rank: statistics.median(r["records"]["forward_time_s"][warmup:] or [0.0])
               for rank, r in enumerate(ranks)}
    slowest = max(forward, key=forward.get)
    if len(step_times) >= 2:
        cv = statistics.pstdev(step_times) / statistics.fmean(step_times)
        passed = cv <= criteria.step_time_cv_max
        checks.append(Check("training.step_time_cv", "step time steady after warm-up", "training", passed, nodes,
                            [] if passed else [_rank_host(ranks, slowest)], round(cv, 4), criteria.step_time_cv_max,
                            "CV", f"{len(step_times)} steps after {warmup} warm-up; mean "
                                  f"{statistics.fmean(step_times) * 1000:.1f} ms; slowest rank {slowest} on "
                                  f"{_rank_host(ranks, slowest)} (median forward "
                                  f"{forward[slowest] * 1000:.1f} ms)"))
    sums = ranks[0]["parameter_checksums"]
    majority = statistics.mode(sums)
    odd = [rank for rank, value in enumerate(sums) if value != majority]
    checks.append(Check("training.parameter_checksum", "parameters identical on every rank at the end", "training",
                        not odd, nodes, sorted({_rank_host(ranks, r) for r in odd}), len(set(sums)), 1,
                        "distinct checksums", f"ranks {odd} differ" if odd else f"checksum {majority!r}"))
    summary = {"ranks": len(ranks), "steps_done": steps_done, "steps_requested": ranks[0]["steps_requested"],
               "preset": ranks[0]["preset"], "backend": ranks[0]["backend"], "bf16": ranks[0]["bf16"],
               "parameters": ranks[0]["parameters"], "tokens_per_second": ranks[0]["tokens_per_second"],
               "mfu": ranks[0]["mfu"], "peak_tflops": ranks[0].get("peak_tflops"),
               "device_name": ranks[0].get("device_name"), "loss_drop_min": drop_min,
               "torch_nccl_version": ranks[0].get("nccl_version"),
               "elapsed_s": ranks[0]["elapsed_s"], "violation": violation,
               "fault_injected": ranks[0]["fault_injected"], "mean_loss": mean_loss, "step_time_s": step_times,
               "hosts_by_rank": [r["host"] for r in ranks]}
    return checks, summary


def _no_train_output(result: dict[str, Any]) -> bool:
    return "PROVISION-TRAIN " not in result.get("stdout", "")


def nccl_versions(results: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The NCCL each node ran, per node: the system library (nccl-tests) and torch's own (the trainer)."""
    system: dict[str, str] = {}
    torch_nccl: dict[str, str] = {}
    for result in results:
        if result.get("rc") != 0:
            continue
        try:
            facts = read_output(result["instrument"], result["stdout"])
        except (ParseError, ValueError, KeyError):
            continue
        if result["instrument"] == "nccl-tests" and facts.get("nccl_version"):
            system.update(dict.fromkeys(result["nodes"], facts["nccl_version"]))
        elif result["instrument"] == "train":
            torch_nccl.update({rank["host"]: rank["nccl_version"] for rank in facts["ranks"]
                               if rank.get("nccl_version")})
    return {"system": dict(sorted(system.items())), "torch": dict(sorted(torch_nccl.items()))}


def node_verdicts(checks: list[Check], nodes: list[str]) -> dict[str, dict[str, Any]]:
    """Per node: failed if any check blames it, with those checks' ids."""
    verdicts = {}
    for node in nodes:
        failed = [check.id for check in checks if not check.passed and node in check.blamed]
        verdicts[node] = {"certified": not failed, "failed_checks": failed}
    return verdicts


def measurement_curves(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """busbw per message size of every measurement (median over its repeats), for the report's plots."""
    grouped: dict[tuple[str, str, tuple[str, ...]], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        instrument = result["instrument"]
        if instrument not in ("nccl-tests", "sweep") or result["rc"] != 0:
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


def json_file(path: Path) -> dict[str, Any] | None:
    """The playbook's hand-over file, or None when the run stopped before writing it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
