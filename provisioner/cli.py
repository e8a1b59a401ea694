"""The `provision` command line: parse arguments, call one function, map the result to an exit code."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from provisioner.ansible.records import latest_record, read_summary
from provisioner.ansible.runner import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RunRequest, run_playbook
from provisioner.errors import InputError, InputProblem, LockHeldError
from provisioner.inventory.loader import Inventory, load_inventory
from provisioner.parsers import PARSERS, ParseError
from provisioner.paths import runs_dir

console = Console()
error_console = Console(stderr=True, soft_wrap=True, highlight=False)


def _add_inventory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inventory", "-i", required=True, help="inventory name (inventory/<name>/) or path")


def _add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", help="where run records go (default: runs/, or $PROVISION_RUNS_DIR)")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    _add_inventory(parser)
    parser.add_argument("--limit", "-l", help="only these hosts or groups (Ansible pattern)")
    parser.add_argument("--tags", "-t", help="only these phases (comma-separated tags)")
    parser.add_argument("--forks", type=int, help="parallel hosts (default from ansible.cfg)")
    _add_runs_dir(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="provision", description="Provision and certify GPU training clusters.")
    commands = parser.add_subparsers(dest="command", required=True)

    inventory = commands.add_parser("inventory", help="inventory commands")
    inventory_commands = inventory.add_subparsers(dest="inventory_command", required=True)
    validate = inventory_commands.add_parser("validate", help="validate an inventory; touches no host")
    _add_inventory(validate)

    apply = commands.add_parser("apply", help="run playbooks/site.yml against the inventory")
    _add_run_options(apply)
    apply.add_argument("--check", action="store_true", help="dry run: report what would change")
    apply.add_argument("--diff", action="store_true", help="show file differences")
    apply.add_argument("--retry-failed", action="store_true",
                       help="rerun only the hosts that failed or were unreachable in the last apply")

    check = commands.add_parser("check", help="drift check: site.yml in check mode with diff; exit 3 on drift")
    _add_run_options(check)

    inspect = commands.add_parser("inspect", help="parse a vendor tool's output and print its facts as JSON")
    inspect.add_argument("kind", choices=sorted(PARSERS), help="which tool printed the file")
    inspect.add_argument("file", help="the tool's output ('-' for standard input)")

    certify = commands.add_parser("certify", help="certify the cluster: NCCL tests and a smoke training, verdicts")
    _add_inventory(certify)
    certify.add_argument("--nodes", help="comma-separated GPU nodes (default: every GPU node)")
    certify.add_argument("--steps", type=int, help="smoke training steps (default: certification_steps, 1000)")
    certify.add_argument("--drain-failed", action="store_true", help="drain failing nodes in Slurm with the reason")
    certify.add_argument("--reservation", help="run inside this Slurm reservation (else the nodes must be idle)")
    certify.add_argument("--only", choices=["communication", "training", "storage"],
                         help="run one part only (default: all; storage where a checkpoints filesystem is named)")
    _add_runs_dir(certify)
    certify.add_argument("--dry-run", action="store_true",
                         help="print the rounds, their jobs and an estimate of the wall time; touch no host")
    certify.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    certify.add_argument("--verbose", action="store_true",
                         help="every check on screen (by default: the summary and the failures)")
    # Testing only: perturb this rank's gradients to prove the gradient-norm check works.
    certify.add_argument("--inject-grad-fault", type=int, help=argparse.SUPPRESS)
    # Testing only: this rank perturbs a tensor of the checkpoint state it resumes from.
    certify.add_argument("--inject-resume-fault", type=int, help=argparse.SUPPRESS)
    replace = commands.add_parser("replace-node", help="rebuild a replaced machine: a GPU node (drained, certified, "
                                  "resumed), the controller, a monitoring or login host")
    replace.add_argument("node")
    _add_inventory(replace)
    replace.add_argument("--reason", default="hardware replaced", help="why (shown in Slurm while it is drained)")
    replace.add_argument("--force", action="store_true", help="requeue the node's jobs instead of waiting for them")
    replace.add_argument("--allow-firmware-update", action="store_true",
                         help="bring the new node's HCA firmware in line (otherwise a difference stops the run)")
    replace.add_argument("--steps", type=int, default=200, help="smoke-training steps (default 200)")
    replace.add_argument("--accept-new-host-key", metavar="FINGERPRINT",
                         help="the new machine's SSH host key fingerprint (SHA256:...), checked on its console; "
                              "without it provision asks on a terminal and refuses elsewhere")
    _add_runs_dir(replace)

    upgrade = commands.add_parser("upgrade", help="roll new pins (driver, firmware, RDMA stack) across the GPU "
                                  "nodes in batches: drain, install, reboot, certify, resume")
    _add_inventory(upgrade)
    upgrade.add_argument("--batch", default="1", help="nodes per batch: a number or a share (10%%); default 1")
    upgrade.add_argument("--max-unavailable", type=int, default=1,
                         help="most GPU nodes out of service at once, those already out included (default 1)")
    upgrade.add_argument("--reason", default="rolling upgrade", help="why (shown in Slurm while a node is drained)")
    upgrade.add_argument("--nodes", help="comma-separated GPU nodes (default: all)")
    upgrade.add_argument("--allow-firmware-update", action="store_true",
                         help="burn the pinned HCA firmware (otherwise a firmware difference stops the batch)")
    upgrade.add_argument("--steps", type=int, default=200, help="smoke-training steps of each certification")
    _add_runs_dir(upgrade)

    drain = commands.add_parser("drain", help="drain a GPU node in Slurm")
    drain.add_argument("node")
    _add_inventory(drain)
    drain.add_argument("--reason", required=True, help="why (shown in Slurm)")
    drain.add_argument("--force", action="store_true", help="requeue the node's jobs")
    drain.add_argument("--wait", action="store_true", help="wait (up to an hour) for its jobs to end")
    _add_runs_dir(drain)

    resume = commands.add_parser("resume", help="return a drained GPU node to service (certified since its last "
                                                "change, unless forced)")
    resume.add_argument("node")
    _add_inventory(resume)
    resume.add_argument("--force", action="store_true", help="resume without a certification since the last change")
    _add_runs_dir(resume)

    _add_plan_parser(commands)

    lab = commands.add_parser("lab", help="the local lab of containers that act as cluster nodes")
    lab_commands = lab.add_subparsers(dest="lab_command", required=True)
    up = lab_commands.add_parser("up", help="build images (cached), start the controller and GPU nodes")
    up.add_argument("--nodes", type=int, default=2, help="GPU nodes (default 2)")
    up.add_argument("--gpus-per-node", type=int, default=8, help="fake GPUs per node (default 8)")
    up.add_argument("--keep-state", action="store_true",
                    help="keep the simulated hardware state of nodes that are reused, and the cluster's "
                         "state on the shared volume (Slurm, accounting dumps, monitoring) for a new controller")
    lab_commands.add_parser("status", help="list the lab's nodes")
    lab_commands.add_parser("down", help="remove the lab's containers, network, volume and inventory")
    return parser


def _add_plan_parser(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser("plan", help="size a cluster for a training job: memory, communication, layout")
    model = plan.add_argument_group("model")
    model.add_argument("--model", help="preset: 1B, 7B, 13B, 70B, 180B, 405B, 8x7B-MoE")
    model.add_argument("--parameters", help="parameter count (7B, 6.7e9); with a preset it overrides the count")
    for name in ("layers", "hidden", "heads", "kv-heads", "ffn"):
        model.add_argument(f"--{name}", type=int, help="a custom model's dimension")
    model.add_argument("--vocab", type=int, default=32000)
    training = plan.add_argument_group("training")
    training.add_argument("--sequence", type=int, default=4096)
    training.add_argument("--micro-batch", type=int, default=1, help="sequences per GPU per micro-batch")
    training.add_argument("--global-batch", type=int,
                          help="sequences per step (default: about 4M tokens, whole micro-batches on every GPU)")
    training.add_argument("--precision", default="bf16",
                          help="bf16, fp16 (mixed, fp32 master), fp8 (GEMMs in fp8) or fp32")
    training.add_argument("--optimizer", default="adamw", help="adamw, adam, sgd, adam-8bit")
    training.add_argument("--zero-stage", type=int, default=1, help="0 (plain DDP), 1, 2, 3 (FSDP full shard)")
    training.add_argument("--checkpointing", action="store_true", help="full activation checkpointing")
    training.add_argument("--selective-recompute", action="store_true",
                          help="attention scores recomputed, not stored (what flash attention does)")
    training.add_argument("--no-sequence-parallel", dest="sequence_parallel", action="store_false",
                          help="norms and dropout run whole on every tensor-parallel rank")
    training.add_argument("--virtual-stages", type=int, default=1,
                          help="interleaved 1F1B: layer chunks per pipeline rank (default 1)")
    training.add_argument("--context-parallel", type=int, default=1,
                          help="GPUs that split each sequence (ring attention; default 1)")
    training.add_argument("--expert-parallel", type=int, default=1,
                          help="data-parallel ranks a MoE's experts are spread over (default 1)")
    training.add_argument("--no-flash-attention", dest="flash_attention", action="store_false",
                          help="attention scores are stored for the backward pass (5·a·s/h per layer)")
    for name in ("tensor-parallel", "pipeline-parallel", "data-parallel"):
        training.add_argument(f"--{name}", type=_degree, help="a degree, or recommend (the default)")
    training.add_argument("--tokens", help="a token budget (15T, 2e12): the days and GPU-hours it takes")
    training.add_argument("--checkpoint-every", type=int, metavar="STEPS",
                          help="with --certification: the overhead of saving a checkpoint every STEPS steps")
    training.add_argument("--mfu", type=float,
                          help="a flat model FLOPs utilisation instead of the compute model")
    training.add_argument("--overlap", type=float, default=0.5,
                          help="fraction of the last backward pass that hides gradient traffic")
    cluster = plan.add_argument_group("cluster")
    cluster.add_argument("--gpu",
                         help="A100-40GB, A100-80GB, H100, H800, H200, GH200, B200, GB200 (or an inventory gpu_model)")
    cluster.add_argument("--gpus-per-node", type=int)
    cluster.add_argument("--nvlink-domain", type=int,
                         help="GPUs one NVLink fabric joins (default: a node; GB200: 72)")
    cluster.add_argument("--nodes", type=int)
    cluster.add_argument("--gpus", type=int, help="total GPUs (whole nodes)")
    cluster.add_argument("--intra-node", help="nvlink3, nvlink4, nvlink5, pcie4, pcie5 (default: the GPU's NVLink)")
    cluster.add_argument("--fabric", help="ib-hdr, ib-ndr, ib-xdr, roce-200, roce-400, eth-100, eth-200, eth-400")
    cluster.add_argument("--hcas-per-node", type=int, help="inter-node ports per node (default: one per GPU)")
    cluster.add_argument("--memory-reserve", type=float, default=0.10,
                         help="fraction of GPU memory kept for CUDA context, NCCL and fragmentation")
    plan.add_argument("--inventory", "-i", help="take GPUs and fabric from this inventory")
    plan.add_argument("--certification", help="a certification.json: use its measured busbw instead of nominal")
    plan.add_argument("--json", action="store_true", help="print the document as JSON")


def _degree(text: str) -> int | None:
    """A parallelism degree, or `recommend` (None)."""
    if text == "recommend":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number nor 'recommend'") from None


def _say(label: str, style: str, text: str) -> None:
    """One line on stderr: a styled label, then text as written (never read as rich markup:
    host names and paths may hold brackets)."""
    error_console.print(Text.assemble((label, style), ": ", text), highlight=False, soft_wrap=True)


def _print_problems(problems: list[InputProblem], what: str) -> None:
    for problem in problems:
        _say("error", "red", str(problem))
    count = len(problems)
    error_console.print(Text(f"{count} problem{'s' if count != 1 else ''} in {what}; nothing was run on any host"),
                        highlight=False, soft_wrap=True)


def _argv() -> list[str]:
    """The command line as the operator typed it, for the run records."""
    return ["provision", *sys.argv[1:]]


def _nodes(text: str | None) -> list[str] | None:
    """A comma-separated node list (--nodes); None when not given."""
    return [node.strip() for node in text.split(",") if node.strip()] if text else None


def _load(name: str) -> Inventory:
    inventory = load_inventory(name)
    for warning in inventory.warnings:
        _say("warning", "yellow", str(warning))
    return inventory


def cmd_validate(args: argparse.Namespace) -> int:
    inventory = _load(args.inventory)
    gpus = sum(node.gpu_count for node in inventory.gpu_nodes.values())
    console.print(Text(f"inventory {inventory.name} ({inventory.hosts_file}) is valid: {len(inventory.hosts)} hosts, "
                       f"{len(inventory.gpu_nodes)} GPU nodes, {gpus} GPUs"), highlight=False)
    return EXIT_OK


def _retry_limit(inventory: Inventory, base: Path) -> str | None:
    record = latest_record(base, "apply", str(inventory.directory.resolve()))
    if record is None:
        raise InputError([InputProblem(str(base), "", f"--retry-failed: no earlier apply on inventory "
                                                      f"{inventory.name} is recorded here")])
    summary = read_summary(record)
    hosts = sorted(set(summary.get("hosts_failed", [])) | set(summary.get("hosts_unreachable", [])))
    console.print(f"last apply: {record.name}; retrying {', '.join(hosts) if hosts else 'no host'}")
    return ",".join(hosts) if hosts else None


def cmd_run(args: argparse.Namespace) -> int:
    inventory = _load(args.inventory)
    base = runs_dir(args.runs_dir)
    command = args.command
    limit = args.limit
    if getattr(args, "retry_failed", False):
        if limit:
            raise InputError([InputProblem("command line", "--retry-failed", "cannot be combined with --limit")])
        limit = _retry_limit(inventory, base)
        if limit is None:
            console.print("nothing to retry: the last apply had no failed or unreachable host")
            return EXIT_OK
    check = command == "check" or getattr(args, "check", False)
    request = RunRequest(
        command=command,
        playbook="check.yml" if command == "check" else "site.yml",
        inventory=inventory,
        runs_dir=base,
        limit=limit,
        tags=args.tags,
        check=check,
        diff=command == "check" or getattr(args, "diff", False),
        forks=args.forks,
        argv=_argv(),
    )
    return run_playbook(request, console).exit_code


def cmd_inspect(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise InputError([InputProblem(args.file, "", f"cannot read: {error.strerror}")]) from error
    try:
        facts = PARSERS[args.kind](text)
    except ParseError as error:
        error_console.print(Text(f"{args.file}: {error}"), soft_wrap=True)
        return EXIT_BAD_INPUT
    print(json.dumps(facts, indent=2))
    return EXIT_OK


def cmd_certify(args: argparse.Namespace) -> int:
    from provisioner.certify.run import PARTS, CertifyRequest, certify, dry_run, print_dry_run

    if args.json and not args.dry_run:
        raise InputError([InputProblem("command line", "--json", "only with --dry-run")])
    request = CertifyRequest(
        inventory=_load(args.inventory), runs_dir=runs_dir(args.runs_dir),
        nodes=_nodes(args.nodes),
        steps=args.steps, drain_failed=args.drain_failed, reservation=args.reservation,
        parts=(args.only,) if args.only else PARTS, inject_grad_fault=args.inject_grad_fault,
        inject_resume_fault=args.inject_resume_fault, verbose=args.verbose,
        argv=_argv())
    if args.dry_run:
        plan = dry_run(request)
        if args.json:
            print(json.dumps(plan, indent=2))
        else:
            print_dry_run(plan, console)
        return EXIT_OK
    return certify(request, console)


def cmd_plan(args: argparse.Namespace) -> int:
    from provisioner.plan.render import print_plan
    from provisioner.plan.run import DoesNotFit, PlanRequest, plan

    if not 0 <= args.memory_reserve < 1:
        raise InputError([InputProblem("command line", "--memory-reserve", "a fraction in [0, 1)")])
    request = PlanRequest(
        model=args.model, parameters=args.parameters, layers=args.layers, hidden=args.hidden, heads=args.heads,
        kv_heads=args.kv_heads, ffn=args.ffn, vocab=args.vocab, sequence=args.sequence,
        micro_batch=args.micro_batch, global_batch=args.global_batch, precision=args.precision,
        optimizer=args.optimizer, zero_stage=args.zero_stage, checkpointing=args.checkpointing,
        flash_attention=args.flash_attention, selective_recompute=args.selective_recompute,
        sequence_parallel=args.sequence_parallel, virtual_stages=args.virtual_stages,
        context_parallel=args.context_parallel, expert_parallel=args.expert_parallel,
        nvlink_domain=args.nvlink_domain,
        tensor_parallel=args.tensor_parallel, pipeline_parallel=args.pipeline_parallel,
        data_parallel=args.data_parallel, gpu=args.gpu, gpus_per_node=args.gpus_per_node, nodes=args.nodes,
        gpus=args.gpus, intra_node=args.intra_node, fabric=args.fabric, hcas_per_node=args.hcas_per_node,
        inventory=_load(args.inventory) if args.inventory else None,
        certification=Path(args.certification) if args.certification else None,
        checkpoint_every=args.checkpoint_every, tokens=args.tokens, mfu=args.mfu,
        overlap=args.overlap, memory_reserve=args.memory_reserve)
    try:
        document, code = plan(request), EXIT_OK
    except DoesNotFit as verdict:
        document, code = verdict.document, EXIT_FAILED
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print_plan(console, document)
    return code


def cmd_replace_node(args: argparse.Namespace) -> int:
    from provisioner.operations.replace_node import ReplaceRequest, replace_node

    if args.steps < 1:
        raise InputError([InputProblem("command line", "--steps", "must be at least 1")])
    return replace_node(ReplaceRequest(
        inventory=_load(args.inventory), node=args.node, runs_dir=runs_dir(args.runs_dir), reason=args.reason,
        force=args.force, allow_firmware_update=args.allow_firmware_update, steps=args.steps,
        argv=_argv(), accept_host_key=args.accept_new_host_key,
        ask=input if sys.stdin.isatty() and sys.stdout.isatty() else None), console)


def cmd_upgrade(args: argparse.Namespace) -> int:
    from provisioner.operations.upgrade import UpgradeRequest, upgrade

    if args.steps < 1:
        raise InputError([InputProblem("command line", "--steps", "must be at least 1")])
    return upgrade(UpgradeRequest(
        inventory=_load(args.inventory), runs_dir=runs_dir(args.runs_dir), batch=args.batch,
        max_unavailable=args.max_unavailable, reason=args.reason, nodes=_nodes(args.nodes),
        allow_firmware_update=args.allow_firmware_update, steps=args.steps,
        argv=_argv()), console)


def cmd_drain_resume(args: argparse.Namespace) -> int:
    from provisioner.operations.drain_resume import NodeRequest, NotCertified, drain, resume

    request = NodeRequest(inventory=_load(args.inventory), node=args.node, runs_dir=runs_dir(args.runs_dir),
                          force=args.force, argv=_argv())
    if args.command == "drain":
        return drain(request, console, args.reason, args.wait)
    try:
        return resume(request, console)
    except NotCertified as refusal:
        _say("refused", "red", str(refusal))
        return EXIT_FAILED


def cmd_lab(args: argparse.Namespace) -> int:
    from provisioner.lab import cluster
    from provisioner.lab.engine import EngineError

    try:
        if args.lab_command == "up":
            statuses = cluster.lab_up(args.nodes, args.gpus_per_node, log=console.print,
                                      reset_state=not args.keep_state)
            _print_lab(statuses)
            console.print(f"next: provision apply --inventory {cluster.lab_inventory_dir()}")
        elif args.lab_command == "status":
            statuses = cluster.lab_status(check_ssh=True)
            if not statuses:
                console.print("no lab is running (provision lab up)")
                return EXIT_FAILED
            _print_lab(statuses)
            return EXIT_OK if all(s.ssh for s in statuses if s.role != "repo") else EXIT_FAILED
        else:
            cluster.lab_down(log=console.print)
            console.print("lab removed")
    except (EngineError, ValueError) as error:
        _say("lab error", "red", str(error))
        return EXIT_FAILED
    return EXIT_OK


def _print_lab(statuses: list) -> None:
    table = Table(title="lab nodes", title_justify="left")
    for column in ("node", "role", "state", "address", "ssh"):
        table.add_column(column)
    for status in statuses:
        ssh = {True: "ok", False: "FAILED", None: "-"}[status.ssh]
        table.add_row(status.name, status.role, status.state, status.address or "-", ssh)
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"inventory": cmd_validate, "apply": cmd_run, "check": cmd_run, "inspect": cmd_inspect,
                "certify": cmd_certify, "plan": cmd_plan, "lab": cmd_lab,
                "replace-node": cmd_replace_node, "upgrade": cmd_upgrade, "drain": cmd_drain_resume,
                "resume": cmd_drain_resume}
    try:
        return handlers[args.command](args)
    except InputError as error:
        what = f"inventory {args.inventory}" if getattr(args, "inventory", None) else "the input"
        _print_problems(error.problems, what)
        return EXIT_BAD_INPUT
    except LockHeldError as error:
        _say("refused", "red", str(error))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # between playbook runs: a run itself is cancelled and recorded
        error_console.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED




if __name__ == "__main__":
    sys.exit(main())
