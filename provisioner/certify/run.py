"""provision certify: plan the jobs, run them through Slurm, judge them, report, drain on request."""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from provisioner.certify import criteria, jobs, report
from provisioner.certify.profiles import ProfileError, Thresholds, thresholds
from provisioner.errors import InputError, InputProblem
from provisioner.inventory import Inventory
from provisioner.runner import EXIT_FAILED, EXIT_OK, RunRequest, run_playbook

PARTS = ("communication", "training")


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
    argv: list[str] | None = None
    # Nodes whose versions may differ from the pins (a rolling upgrade's partner, not yet
    # upgraded): the version check still holds every other node to the pins and to each other.
    version_exempt: tuple[str, ...] = ()


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
        expect_gdr=bool(inventory.hostvars[nodes[0]].get("certification_expect_gdr", True)))


def _print_checks(console: Console, checks: list[criteria.Check]) -> None:
    table = Table(title="certification checks", title_justify="left")
    for column in ("", "check", "blamed", "measured", "threshold"):
        table.add_column(column)
    for check in checks:
        measured = "" if check.measured is None else f"{check.measured} {check.unit}".strip()
        table.add_row("[green]pass[/]" if check.passed else "[red]FAIL[/]", check.name, ", ".join(check.blamed),
                      measured, "" if check.threshold is None else str(check.threshold))
    console.print(table)
    for check in checks:
        if not check.passed:
            console.print(f"[red]FAIL[/] {check.name}: {check.detail}", highlight=False)


def _drain(request: CertifyRequest, verdicts: dict[str, dict[str, Any]], console: Console) -> int:
    failed = [{"node": node, "reason": ("certify: " + ", ".join(v["failed_checks"]))[:120]}
              for node, v in verdicts.items() if not v["certified"]]
    if not failed:
        return EXIT_OK
    outcome = run_playbook(RunRequest(command="drain", playbook="drain.yml", inventory=request.inventory,
                                      runs_dir=request.runs_dir, extravars={"_drain": failed},
                                      argv=request.argv or []), console)
    return outcome.exit_code


def certify(request: CertifyRequest, console: Console) -> int:
    """Run the certification; 0 certified, 1 not certified (or refused), 2 bad input (raised)."""
    return run_certification(request, console)[0]


def run_certification(request: CertifyRequest, console: Console) -> tuple[int, Path | None, dict[str, Any] | None]:
    """The certification's exit code, run record and certification.json document (None where no job ran)."""
    inventory = request.inventory
    nodes = selected_nodes(inventory, request.nodes)
    if not nodes:
        raise _problem(inventory, "gpu_nodes", "no GPU nodes to certify")
    judge = build_criteria(inventory, nodes)
    steps = request.steps if request.steps is not None else inventory.cluster.certification_steps
    if steps < 1:
        raise InputError([InputProblem("command line", "--steps", "must be at least 1")])
    planned = jobs.plan(nodes, repeats=3, steps=steps, preset=inventory.cluster.certification_preset,
                        inject_grad_fault=request.inject_grad_fault, parts=request.parts,
                        bucket_mb=inventory.cluster.certification_ddp_bucket_mb,
                        ranks_per_node=ranks_per_node(inventory, nodes[0]))
    started, clock = datetime.now(UTC), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="provision-certify-") as scratch:
        output = Path(scratch) / "jobs.json"
        outcome = run_playbook(RunRequest(
            command="certify", playbook="certify.yml", inventory=inventory, runs_dir=request.runs_dir,
            extravars={"_certify_nodes": nodes, "_certify_jobs": jobs.as_dicts(planned),
                       "_certify_output": str(output), "_certify_reservation": request.reservation or "",
                       "_certify_version_exempt": list(request.version_exempt)},
            argv=request.argv or []), console)
        handed = criteria.json_file(output)
    if handed is None:
        console.print("[red]certification did not run[/]: the playbook stopped before the jobs (see above)")
        return outcome.exit_code or EXIT_FAILED, outcome.record, None
    if "refused" in handed:
        reasons = handed.get("busy") or [f"{d['host']}: {d['component']} {d['found']} (expected {d['expected']})"
                                          for d in handed.get("differences", [])]
        console.print(f"[red]certification refused[/]: {handed['refused']}", highlight=False)
        for reason in reasons:
            console.print(f"  {reason}", highlight=False)
        return EXIT_FAILED, outcome.record, None
    results = handed["results"]
    checks, medians = criteria.communication_checks(results, judge)
    training_result = next((r for r in results if r["instrument"] == "train"), None)
    training_checks, training = criteria.training_checks(training_result, nodes, judge)
    checks += training_checks
    verdicts = criteria.node_verdicts(checks, nodes)
    certified = all(check.passed for check in checks) and bool(checks) and request.inject_grad_fault is None
    document = {
        "cluster": inventory.cluster.cluster_name, "inventory": inventory.name, "nodes": nodes,
        "started": started.isoformat(timespec="seconds"), "duration_s": round(time.monotonic() - clock, 1),
        "certified": certified, "parts": list(request.parts), "thresholds": asdict(judge.thresholds),
        "criteria": {k: v for k, v in asdict(judge).items() if k != "thresholds"},
        "fault_injected": request.inject_grad_fault is not None,
        "node_verdicts": verdicts, "checks": [check.as_dict() for check in checks], "medians_gbps": medians,
        "curves": criteria.measurement_curves(results), "training": training,
        "nccl_versions": criteria.nccl_versions(results),
        "jobs": [{k: r[k] for k in ("name", "instrument", "scope", "nodes", "rc", "start", "end")} for r in results],
        "raw_outputs": [{"name": r["name"], "stdout": r["stdout"], "stderr": r["stderr"]} for r in results],
    }
    record = outcome.record
    report.write_json(record / "certification.json", document)
    report.write_junit(record / "certification.junit.xml", document)
    report.write_html(record / "certification.html", document)
    _print_checks(console, checks)
    for node, verdict in verdicts.items():
        failed = ", ".join(verdict["failed_checks"])
        state = "[green]certified[/]" if verdict["certified"] else f"[red]FAILED[/] {failed}"
        console.print(f"{node}: {state}", highlight=False)
    console.print(f"{'[green]CERTIFIED' if certified else '[red]NOT CERTIFIED'}[/]; report: "
                  f"{record / 'certification.html'}", highlight=False)
    if request.drain_failed:
        _drain(request, verdicts, console)
    return EXIT_OK if certified else EXIT_FAILED, record, document
