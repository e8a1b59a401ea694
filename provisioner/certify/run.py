"""provision certify: plan the rounds, run them through Slurm from the controller, judge them,
report, drain on request."""

from __future__ import annotations

import json
import math
import tarfile
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from provisioner.ansible import playbooks
from provisioner.ansible.lock import inventory_lock
from provisioner.ansible.records import make_private
from provisioner.ansible.runner import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RunOutcome
from provisioner.certify import bundle, criteria, report, report_html
from provisioner.certify.profiles import ProfileError, Thresholds, durations_s, thresholds
from provisioner.certify.progress import CertifyProgress
from provisioner.certify.schedule import Round, base_rounds, estimate_s
from provisioner.certify.summary import figure, print_summary, summarise
from provisioner.errors import InputError, InputProblem
from provisioner.inventory.model import Inventory
from provisioner.parsers.common import ParseError
from provisioner.plan.checkpoint import Checkpoint, checkpoint

PARTS = ("communication", "training", "storage")
# The smoke training saves a checkpoint this many steps before its end; a second job resumes
# from it and trains them again.
RESUME_STEPS = 20
# Relative difference allowed between a resumed GPU training and the one that went on.
RESUME_GPU_TOLERANCE = 1e-2
# The interval the save overhead is shown at (docs/certify.md): a checkpoint an hour; the
# default save and load limits are 5 % of it (180 s).
CHECKPOINT_INTERVAL_S = 3600.0
REPEATS = 3
# Checks printed in full on the terminal up to this many; beyond, the failing ones only.


@dataclass
class CertifyRequest:
    inventory: Inventory
    runs_dir: Path
    nodes: list[str] | None = None
    steps: int | None = None
    drain_failed: bool = False
    reservation: str | None = None
    parts: tuple[str, ...] = PARTS
    inject_grad_fault: int | None = None
    inject_resume_fault: int | None = None
    argv: list[str] | None = None
    # Nodes whose versions may differ from the pins (a rolling upgrade's partner, not yet
    # upgraded): the version check still holds every other node to the pins and to each other.
    version_exempt: tuple[str, ...] = ()
    verbose: bool = False  # every check on screen, not only the failures


def _problem(inventory: Inventory, key: str, message: str) -> InputError:
    return InputError([InputProblem(str(inventory.hosts_file), key, message)])


def selected_nodes(inventory: Inventory, asked: list[str] | None) -> list[str]:
    gpu_nodes = inventory.group("gpu_nodes")
    if not asked:
        return gpu_nodes
    unknown = [node for node in asked if node not in gpu_nodes]
    if unknown:
        raise InputError([InputProblem("command line", "--nodes",
                                       f"not GPU nodes of inventory {inventory.name}: {', '.join(unknown)}")])
    return list(dict.fromkeys(asked))


def fleet_thresholds(inventory: Inventory, nodes: list[str]) -> Thresholds:
    """The hardware profile's thresholds for these nodes (one GPU model), inventory overrides applied."""
    cluster = inventory.cluster
    kinds = inventory.node_kinds(nodes)
    models, hcas, rates = kinds["gpu_model"], kinds["ib_hca_count"], kinds["port_rate"]
    if len(models) > 1 or len(hcas) > 1 or len(rates) > 1:
        raise _problem(inventory, "gpu_model", f"certification compares like with like: the nodes have GPU models "
                                               f"{sorted(models)}, HCA counts {sorted(hcas)}, port rates "
                                               f"{sorted(rates)}; certify each kind with --nodes")
    override = cluster.certification_busbw_thresholds_gbps
    try:
        return thresholds(cluster.certification_profile, models.pop(), hcas.pop(), rates.pop(),
                          override.model_dump(exclude_none=True) if override else None)
    except ProfileError as error:
        raise _problem(inventory, "certification_profile", str(error)) from error


def ranks_per_node(inventory: Inventory, node: str) -> int:
    """Ranks per node (certification_procs_per_node, else one per GPU); a templated value counts as several."""
    value = inventory.hostvars[node].get("certification_procs_per_node", inventory.gpu_nodes[node].gpu_count)
    return value if isinstance(value, int) else 2


def build_criteria(inventory: Inventory, nodes: list[str]) -> criteria.Criteria:
    cluster = inventory.cluster
    return criteria.Criteria(
        thresholds=fleet_thresholds(inventory, nodes), gradient_bytes=cluster.certification_gradient_bytes,
        variance_percent=cluster.certification_variance_percent,
        step_time_cv_max=cluster.certification_step_time_cv_max, loss_drop_min=cluster.certification_loss_drop_min,
        warmup_steps=cluster.certification_warmup_steps, fabric=cluster.fabric,
        bucket_bytes=int(cluster.certification_ddp_bucket_mb * (1 << 20)),
        bucket_floor_share=cluster.certification_bucket_floor_share,
        straggler_percent=cluster.certification_straggler_percent,
        checkpoint_save_max_s=cluster.certification_checkpoint_save_max_s,
        checkpoint_load_max_s=cluster.certification_checkpoint_load_max_s,
        expect_gdr=bool(inventory.hostvars[nodes[0]].get("certification_expect_gdr", True)))


def _steps(request: CertifyRequest) -> int:
    steps = request.steps if request.steps is not None else request.inventory.cluster.certification_steps
    if steps < 1:
        raise InputError([InputProblem("command line", "--steps", "must be at least 1")])
    return steps


def training_args(request: CertifyRequest, run_id: str = "dry-run") -> list[str]:
    cluster = request.inventory.cluster
    args = ["--preset", cluster.certification_preset, "--steps", str(_steps(request)),
            "--bucket-mb", f"{cluster.certification_ddp_bucket_mb:g}",
            "--warmup-steps", str(cluster.certification_warmup_steps)]
    if request.inject_grad_fault is not None:
        args += ["--inject-grad-fault", str(request.inject_grad_fault)]
    if resume_steps(request):
        args += ["--checkpoint-dir", _resume_directory(request, run_id),
                 "--save-at", str(_steps(request) - resume_steps(request))]
    return args


def resume_steps(request: CertifyRequest) -> int:
    """Steps the resumed training repeats (0: no resume check: no training, or no shared
    checkpoints filesystem for the ranks to save to and load from)."""
    steps = _steps(request)
    if "training" not in parts(request) or request.inventory.cluster.checkpoint_filesystem is None or steps < 2:
        return 0
    return min(RESUME_STEPS, steps // 2)


def _resume_directory(request: CertifyRequest, run_id: str) -> str:
    filesystem = request.inventory.cluster.checkpoint_filesystem
    assert filesystem is not None
    return f"{filesystem.path.rstrip('/')}/.provision-certify/{run_id}-resume"


def resume_args(request: CertifyRequest, run_id: str = "dry-run") -> list[str]:
    """The resumed training: each node takes the next node's ranks (their shards, written by
    another node), loads the checkpoint and trains the last steps again."""
    if not resume_steps(request):
        return []
    reference = training_args(request, run_id)
    save_at = reference.index("--save-at")
    args = ["--rotate-nodes", *reference[:save_at], *reference[save_at + 2:], "--resume"]
    if request.inject_resume_fault is not None:
        args += ["--inject-resume-fault", str(request.inject_resume_fault)]
    return args


def _check_timing(inventory: Inventory) -> None:
    cluster = inventory.cluster
    if cluster.certification_heartbeat_s * 3 > cluster.certification_hang_timeout_s:
        raise _problem(inventory, "certification_heartbeat_s",
                       f"{cluster.certification_heartbeat_s:g} s is more than a third of "
                       f"certification_hang_timeout_s ({cluster.certification_hang_timeout_s:g} s): a rank "
                       "that only waits would look hung")


def parts(request: CertifyRequest) -> tuple[str, ...]:
    """The parts to run: storage only where the inventory names a checkpoints filesystem (asked
    for alone without one, a bad request)."""
    if "storage" not in request.parts or request.inventory.cluster.checkpoint_filesystem is not None:
        return request.parts
    if request.parts == ("storage",):
        raise _problem(request.inventory, "storage_filesystems", "no checkpoints filesystem to certify (--only "
                                                                 "storage needs one with purpose checkpoints)")
    return tuple(part for part in request.parts if part != "storage")


def target_checkpoint(inventory: Inventory) -> Checkpoint:
    """The target model's checkpoint as the whole fleet would write it: one shard per rank of every
    GPU node, so that each node writes its part whichever nodes are certified."""
    nodes = inventory.group("gpu_nodes")
    ranks = sum(ranks_per_node(inventory, node) for node in nodes)
    return checkpoint(inventory.cluster.certification_checkpoint_model, ranks)


def storage_args(request: CertifyRequest) -> list[str]:
    return ["--bytes-per-rank", str(math.ceil(target_checkpoint(request.inventory).shard_bytes))]


def planned_rounds(request: CertifyRequest) -> tuple[list[str], list[Round]]:
    """The nodes and the rounds of a healthy run (validating the request on the way)."""
    inventory = request.inventory
    nodes = selected_nodes(inventory, request.nodes)
    if not nodes:
        raise _problem(inventory, "gpu_nodes", "no GPU nodes to certify")
    fleet_thresholds(inventory, nodes)
    _check_timing(inventory)
    return nodes, base_rounds(nodes, parts(request), ranks_per_node(inventory, nodes[0]), REPEATS,
                              training_args(request), storage_args(request), resume_args(request))


def last_durations(inventory: Inventory, runs_dir: Path) -> tuple[dict[str, float], str] | None:
    """Median seconds per run of each instrument in the inventory's newest certification.json."""
    records = sorted(runs_dir.glob("*-certify/certification.json"), reverse=True) if runs_dir.is_dir() else []
    for path in records:
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if document.get("inventory") != inventory.name:
            continue
        seconds: dict[str, list[float]] = {}
        for job in document.get("jobs", []):
            if job.get("start") and job.get("end") and job.get("rc") == 0:
                began, ended = (datetime.fromisoformat(job[key]) for key in ("start", "end"))
                seconds.setdefault(job["instrument"], []).append((ended - began).total_seconds())
        if seconds:
            medians = {k: sorted(v)[len(v) // 2] for k, v in seconds.items()}
            return medians, f"measured: {path.parent.name}/certification.json"
    return None


def run_durations(request: CertifyRequest, nodes: list[str]) -> tuple[dict[str, float], str]:
    """Seconds per run of each instrument, and their source: what the inventory's newest
    certification measured, else the profile's defaults."""
    cluster = request.inventory.cluster
    defaults, source = durations_s(cluster.certification_profile, cluster.certification_preset, len(nodes),
                                   _steps(request))
    measured = last_durations(request.inventory, request.runs_dir)
    if not measured:
        return defaults, source
    return {**defaults, **measured[0]}, f"{measured[1]} ({', '.join(sorted(measured[0]))}); otherwise {source}"


def dry_run(request: CertifyRequest) -> dict[str, Any]:
    """The rounds a healthy run takes and an estimate of its wall time; touches no host."""
    nodes, rounds = planned_rounds(request)
    durations, source = run_durations(request, nodes)
    return {
        "inventory": request.inventory.name, "nodes": nodes, "parts": list(parts(request)),
        "rounds": [[{"instrument": job.instrument, "scope": job.scope, "nodes": job.nodes, "repeats": job.repeats}
                    for job in round_.jobs] for round_ in rounds],
        "round_names": [round_.name for round_ in rounds],
        "estimate_s": round(estimate_s(rounds, durations), 1),
        "durations_s": durations, "durations_source": source,
        "note": "a healthy fleet's rounds; a failure adds localisation rounds (at most about log2 of the nodes)",
    }


def print_dry_run(plan: dict[str, Any], console: Console) -> None:
    console.print(f"certification of {len(plan['nodes'])} GPU node(s), inventory {plan['inventory']}: "
                  f"{len(plan['rounds'])} rounds", highlight=False)
    for number, (name, jobs) in enumerate(zip(plan["round_names"], plan["rounds"], strict=True), 1):
        shown = ", ".join("+".join(job["nodes"]) if job["scope"] != "all" else f"all {len(job['nodes'])} nodes"
                          for job in jobs[:6])
        more = f", ... ({len(jobs)} jobs)" if len(jobs) > 6 else ""
        repeats = f" x{jobs[0]['repeats']}" if jobs[0]["repeats"] > 1 else ""
        console.print(f"  {number}. {name}{repeats}: {shown}{more}", highlight=False, soft_wrap=True)
    console.print(f"estimate: {plan['estimate_s'] / 60:.1f} min ({plan['durations_source']}: "
                  + ", ".join(f"{k} {v:g} s" for k, v in sorted(plan["durations_s"].items())) + " per run)",
                  highlight=False, soft_wrap=True)
    console.print(plan["note"], highlight=False)


def _print_checks(console: Console, checks: list[criteria.Check]) -> None:
    """Every check (--verbose)."""
    table = Table(title=f"certification checks ({len(checks)})", title_justify="left")
    for column in ("", "check", "blamed", "measured", "threshold"):
        table.add_column(column)
    for check in checks:
        table.add_row("[green]pass[/]" if check.passed else "[red]FAIL[/]", check.name, ", ".join(check.blamed),
                      figure(check.measured, check.unit), figure(check.threshold, check.unit))
    console.print(table)


def _drain(request: CertifyRequest, verdicts: dict[str, dict[str, Any]], console: Console) -> int:
    failed = {node: "certify: " + ", ".join(v["failed_checks"]) for node, v in verdicts.items() if not v["certified"]}
    if not failed:
        return EXIT_OK
    return playbooks.drain(request, console, "drain", failed).exit_code


def certify(request: CertifyRequest, console: Console) -> int:
    """Run the certification; 0 certified, 1 not certified (or refused), 2 bad input (raised)."""
    return run_certification(request, console)[0]


def _driver_plan(request: CertifyRequest, nodes: list[str], judge: criteria.Criteria, run_id: str) -> dict[str, Any]:
    cluster = request.inventory.cluster
    return {
        "run_id": run_id, "nodes": nodes, "parts": list(parts(request)),
        "ranks_per_node": ranks_per_node(request.inventory, nodes[0]), "repeats": REPEATS,
        "training_args": training_args(request, run_id), "storage_args": storage_args(request),
        "resume_args": resume_args(request, run_id),
        "limits": {"intra_node_gbps": judge.thresholds.intra_node_gbps,
                   "inter_node_gbps": judge.thresholds.inter_node_gbps,
                   "variance_percent": judge.variance_percent},
        "gradient_bytes": judge.gradient_bytes, "straggler_percent": judge.straggler_percent,
        "hang_timeout_s": cluster.certification_hang_timeout_s, "heartbeat_s": cluster.certification_heartbeat_s,
        "max_concurrent": cluster.certification_max_concurrent_jobs,
        "durations_s": run_durations(request, nodes)[0],
    }


def _playbook(request: CertifyRequest, console: Console, playbook: str, extravars: dict[str, Any],
              progress: CertifyProgress | None = None) -> RunOutcome:
    return playbooks.run(request, console, "certify", playbook, extravars,
                         on_event=progress.on_event if progress else None)


def _iso(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds") if epoch else None


def read_archive(archive: Path, record: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The driver's results and every run of every job (its output read from the archive,
    which stays in the run record as certification-outputs/)."""
    target = record / "certification-outputs"
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    make_private(target)
    results = json.loads((target / "results.json").read_text())
    runs = []
    for number, round_ in enumerate(results["rounds"]):
        for entry in round_["jobs"]:
            job = entry["job"]
            for run in entry["runs"]:
                runs.append({
                    "name": f"{job['name']} #{run['repeat']}", "instrument": job["instrument"], "scope": job["scope"],
                    "nodes": job["nodes"], "repeat": run["repeat"], "args": job["args"], "round": number,
                    "rc": run.get("rc", -1), "start": _iso(run.get("start")), "end": _iso(run.get("end")),
                    "hung": bool(run.get("hung")), "hung_named": run.get("hung_named") or [],
                    "hung_detail": run.get("hung_detail", ""),
                    "stdout": (target / run["stdout_file"]).read_text(errors="replace"),
                    "stderr": (target / run["stderr_file"]).read_text(errors="replace"),
                    "stdout_file": f"certification-outputs/{run['stdout_file']}",
                    "stderr_file": f"certification-outputs/{run['stderr_file']}"})
    return results, runs


def _rounds_for_report(results: dict[str, Any]) -> list[dict[str, Any]]:
    rounds = []
    for round_ in results["rounds"]:
        rounds.append({"name": round_["name"], "kind": round_["kind"], "start": _iso(round_["start"]),
                       "end": _iso(round_["end"]), "duration_s": round((round_["end"] or round_["start"])
                                                                        - round_["start"], 1),
                       "jobs": [{"name": entry["job"]["name"], "instrument": entry["job"]["instrument"],
                                 "scope": entry["job"]["scope"], "nodes": entry["job"]["nodes"],
                                 "purpose": entry["job"].get("purpose", ""), "runs": len(entry["runs"]),
                                 **entry["outcome"]} for entry in round_["jobs"]]})
    return rounds


def run_certification(request: CertifyRequest, console: Console) -> tuple[int, Path | None, dict[str, Any] | None]:
    """The certification's exit code, run record and certification.json document (None where no job ran).

    The inventory's lock is held from the first job to the last drain: no apply slips in
    between a node's failed verdict and its drain."""
    with inventory_lock(request.inventory.directory, "certify", covers_nested=True):
        return _run_certification_locked(request, console)


def _run_certification_locked(request: CertifyRequest,
                              console: Console) -> tuple[int, Path | None, dict[str, Any] | None]:
    inventory = request.inventory
    nodes, _ = planned_rounds(request)
    judge = build_criteria(inventory, nodes)
    run_id = uuid.uuid4().hex[:10]
    started, clock = datetime.now(UTC), time.monotonic()
    progress = CertifyProgress(console)
    with tempfile.TemporaryDirectory(prefix="provision-certify-") as scratch:
        output, archive = Path(scratch) / "refusal.json", Path(scratch) / "outputs.tar.gz"
        extravars = {"_certify_nodes": nodes, "_certify_plan": _driver_plan(request, nodes, judge, run_id),
                     "_certify_bundle": str(bundle.build(Path(scratch) / "driver.pyz")),
                     "_certify_output": str(output), "_certify_archive": str(archive),
                     "_certify_reservation": request.reservation or "",
                     "_certify_version_exempt": list(request.version_exempt)}
        outcome = _playbook(request, console, "certify.yml", extravars, progress)
        interrupted = outcome.exit_code == EXIT_INTERRUPTED
        if interrupted or (not archive.exists() and not output.exists()):
            # The driver may still be running on the controller: stop it, keep what ran.
            console.print("[yellow]stopping the certification's jobs on the controller[/]")
            _playbook(request, console, "certify_cancel.yml", {"_certify_run_id": run_id,
                                                               "_certify_archive": str(archive)})
        refusal = playbooks.read_handed(output)
        record = outcome.record
        if refusal is not None:
            reasons = refusal.get("busy") or [f"{d['host']}: {d['component']} {d['found']} (expected "
                                              f"{d['expected']})" for d in refusal.get("differences", [])]
            console.print(f"[red]certification refused[/]: {refusal['refused']}", highlight=False)
            for reason in reasons:
                console.print(f"  {reason}", highlight=False)
            return EXIT_FAILED, record, None
        if not archive.exists():
            console.print("[red]certification did not run[/]: the playbook stopped before the jobs (see above)")
            return (EXIT_INTERRUPTED if interrupted else outcome.exit_code or EXIT_FAILED), record, None
        results, runs = read_archive(archive, record)
    document = judge_and_report(request, nodes, judge, results, runs, record, started, time.monotonic() - clock,
                                interrupted or bool(results.get("interrupted")), console)
    if request.drain_failed and not interrupted:
        _drain(request, document["node_verdicts"], console)
    if interrupted:
        return EXIT_INTERRUPTED, record, document
    return (EXIT_OK if document["certified"] else EXIT_FAILED), record, document


def _resume_checks(runs: list[dict[str, Any]]) -> tuple[list[criteria.Check], dict[str, Any]]:
    """The resumed training against the training that saved its checkpoint and went on: bitwise
    on CPUs (gloo); on GPUs within RESUME_GPU_TOLERANCE, since the ranks sit on other nodes and
    NCCL may reduce in another order there."""
    resumed_run = next((run for run in runs if run["instrument"] == "train" and run["scope"] == "resume"), None)
    if resumed_run is None:
        return [], {}
    reference_run = next((run for run in reversed(runs) if run["instrument"] == "train"
                          and run["scope"] == "training" and run["nodes"] == resumed_run["nodes"]
                          and run["rc"] == 0), None)
    if reference_run is None:
        return [criteria.Check("training.resume.ran", "smoke training resumed from its checkpoint", "training", False,
                               resumed_run["nodes"], [], detail="no training saved the checkpoint")], {}
    try:
        resumed, reference = criteria.run_facts(resumed_run, "train"), criteria.run_facts(reference_run, "train")
    except (ParseError, ValueError, KeyError) as error:
        return [criteria.Check("training.resume.ran", "smoke training resumed from its checkpoint", "training", False,
                               resumed_run["nodes"], [], detail=str(error))], {}
    tolerance = 0.0 if resumed.get("device_name") == "cpu" else RESUME_GPU_TOLERANCE
    checks, curves = criteria.resume_checks(reference, resumed, tolerance)
    return checks, curves


def judge_and_report(request: CertifyRequest, nodes: list[str], judge: criteria.Criteria, results: dict[str, Any],
                     runs: list[dict[str, Any]], record: Path, started: datetime, duration: float,
                     interrupted: bool, console: Console) -> dict[str, Any]:
    """Checks, verdicts, certification.json/junit/html, and the verdict on screen."""
    inventory = request.inventory
    localised = set(results.get("blamed") or {})
    checks, medians = criteria.communication_checks(runs, judge, localised)
    checks += criteria.finding_checks(results.get("findings") or [], localised)
    cpu_checks, cpus = criteria.cpu_checks(runs, nodes, ranks_per_node(inventory, nodes[0]),
                                           results.get("node_cpus") or {})
    checks += cpu_checks
    storage_checks, storage = criteria.storage_checks(runs, judge, target_checkpoint(inventory).as_dict(),
                                                      CHECKPOINT_INTERVAL_S)
    checks += storage_checks
    resume_checks, resume = _resume_checks(runs)
    checks += resume_checks
    trainings = []
    for number, run in enumerate(r for r in runs if r["instrument"] == "train" and r["scope"] != "resume"):
        prefix, title = ("training", "smoke training") if number == 0 else (
            f"training.{number}", f"smoke training #{number + 1} ({run['scope']}, {'+'.join(run['nodes'])})")
        training_checks, summary = criteria.training_checks(run, run["nodes"], judge, prefix, title, localised)
        checks += training_checks
        if summary:
            trainings.append(summary)
    verdicts = criteria.node_verdicts(checks, nodes, results.get("blamed") or {})
    certified = (all(check.passed for check in checks) and bool(checks) and request.inject_grad_fault is None
                 and request.inject_resume_fault is None and not interrupted)
    document = {
        "cluster": inventory.cluster.cluster_name, "inventory": inventory.name, "nodes": nodes,
        "started": started.isoformat(timespec="seconds"), "duration_s": round(duration, 1),
        "certified": certified, "interrupted": interrupted, "parts": list(parts(request)),
        "thresholds": asdict(judge.thresholds),
        "criteria": {k: v for k, v in asdict(judge).items() if k != "thresholds"},
        "hang_timeout_s": inventory.cluster.certification_hang_timeout_s,
        "fault_injected": request.inject_grad_fault is not None,
        "node_verdicts": verdicts, "checks": [check.as_dict() for check in checks], "medians_gbps": medians,
        "schedule": {"base_rounds": sum(r["kind"] == "base" for r in results["rounds"]),
                     "localise_rounds": sum(r["kind"] != "base" for r in results["rounds"])},
        "rounds": _rounds_for_report(results), "findings": results.get("findings") or [],
        "localised": results.get("blamed") or {}, "excluded": results.get("excluded") or {},
        "cpus": cpus, "node_cpus": results.get("node_cpus") or {},
        "curves": criteria.measurement_curves(runs), "training": trainings[0] if trainings else {},
        "trainings": trainings, "nccl_versions": criteria.nccl_versions(runs),
        **({"storage": storage} if storage else {}), **({"resume": resume} if resume else {}),
        "jobs": [{k: r[k] for k in ("name", "instrument", "scope", "nodes", "round", "rc", "start", "end", "hung")}
                 for r in runs],
        "raw_outputs": [{k: r[k] for k in ("name", "stdout_file", "stderr_file")} for r in runs],
    }
    report.write_json(record / "certification.json", document)
    report.write_junit(record / "certification.junit.xml", document)
    report_html.write_html(record / "certification.html", document)
    if request.verbose:
        _print_checks(console, checks)
    print_summary(console, summarise(document), str(record / "certification.html"))
    return document
