"""`provision plan`: turn the command line (and an inventory or certification) into a sizing document."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import InputError, InputProblem
from provisioner.inventory.model import Inventory
from provisioner.plan import checkpoint, compute, formulas, hardware, sizing, sources
from provisioner.plan.models import PRESETS, ModelShape, custom_shape, parse_count

ARGS = "command line"


class DoesNotFit(Exception):
    """No layout of the cluster holds the job in GPU memory; the document says by how much."""

    def __init__(self, document: dict):
        self.document = document
        super().__init__(document["verdict"])


@dataclass
class PlanRequest:
    model: str | None = None
    parameters: str | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn: int | None = None
    vocab: int = 32000
    sequence: int = 4096
    micro_batch: int = 1
    global_batch: int | None = None
    precision: str = "bf16"
    optimizer: str = "adamw"
    zero_stage: int = 1
    checkpointing: bool = False
    selective_recompute: bool = False
    flash_attention: bool = True
    sequence_parallel: bool = True
    virtual_stages: int = 1
    context_parallel: int = 1
    expert_parallel: int = 1
    nvlink_domain: int | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    data_parallel: int | None = None
    gpu: str | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    gpus: int | None = None
    intra_node: str | None = None
    fabric: str | None = None
    hcas_per_node: int | None = None
    inventory: Inventory | None = None
    certification: Path | None = None
    checkpoint_every: int | None = None
    tokens: str | None = None  # a token budget (15T): the time and GPU-hours it takes
    mfu: float | None = None  # None: the compute model
    overlap: float = 0.5
    memory_reserve: float = 0.10


DEFAULT_BATCH_TOKENS = 4 * 2**20  # about 4M tokens per step, the batch Llama 2 was trained with


def default_global_batch(sequence: int, micro_batch: int) -> int:
    """About 4M tokens in whole micro-batches, whatever the cluster: the same job planned on more
    GPUs keeps its batch (which then limits data parallelism, as it does in practice)."""
    micro_batches = max(1, round(DEFAULT_BATCH_TOKENS / (sequence * micro_batch)))
    return micro_batches * micro_batch


def _shape(request: PlanRequest, problems: list[InputProblem]) -> tuple[ModelShape | None, float | None]:
    dimensions = (request.layers, request.hidden, request.heads)
    count = None
    if request.parameters:
        try:
            count = parse_count(request.parameters)
        except ValueError as error:
            problems.append(InputProblem(ARGS, "--parameters", str(error)))
    if request.model:
        key = next((k for k in PRESETS if k.lower() == request.model.lower()), None)
        if key is None:
            problems.append(InputProblem(ARGS, "--model", f"unknown preset {request.model!r}; known: "
                                         f"{', '.join(PRESETS)}"))
            return None, None
        return PRESETS[key], count
    if all(dimensions):
        shape = custom_shape(request.layers, request.hidden, request.heads, request.vocab, request.ffn,
                             request.kv_heads)
        if request.hidden % request.heads:
            problems.append(InputProblem(ARGS, "--heads", f"{request.heads} heads do not divide --hidden "
                                         f"{request.hidden}"))
        return shape, count
    problems.append(InputProblem(ARGS, "--model", "give a preset (--model 7B) or the model's dimensions "
                                 "(--layers, --hidden, --heads; --parameters alone cannot size activations)"))
    return None, None


def _positive(problems: list[InputProblem], **values: float | None) -> None:
    for name, value in values.items():
        if value is not None and value <= 0:
            problems.append(InputProblem(ARGS, "--" + name.replace("_", "-"), f"must be positive, got {value}"))


def _cluster(request: PlanRequest, problems: list[InputProblem]) -> sizing.Cluster | None:
    gpu_name, per_node, nodes = request.gpu, request.gpus_per_node, request.nodes
    fabric_name, hcas = request.fabric, request.hcas_per_node
    if request.inventory is not None:
        found = sources.from_inventory(request.inventory)
        gpu_name = gpu_name or found.gpu_model
        per_node = per_node or found.gpus_per_node
        nodes = nodes or found.nodes
        fabric_name = fabric_name or hardware.fabric_for_inventory(found.fabric, found.port_rate_gbit)
        hcas = hcas or found.hcas_per_node or None
    per_node = per_node or 8
    if request.gpus:
        if request.gpus % per_node:
            problems.append(InputProblem(ARGS, "--gpus", f"{request.gpus} GPUs are not whole nodes of {per_node}"))
            return None
        nodes = request.gpus // per_node
    gpu = hardware.gpu_for_model(gpu_name or "")
    if gpu is None:
        problems.append(InputProblem(ARGS, "--gpu", f"unknown GPU {gpu_name!r}; known: {', '.join(hardware.GPUS)}"
                                     if gpu_name else "give --gpu (or --inventory)"))
    if not nodes:
        problems.append(InputProblem(ARGS, "--nodes", "give --nodes or --gpus (or --inventory)"))
    fabric = hardware.FABRICS.get(fabric_name or "ib-ndr")
    if fabric is None:
        problems.append(InputProblem(ARGS, "--fabric", f"unknown fabric {fabric_name!r}; known: "
                                     f"{', '.join(hardware.FABRICS)}"))
    link_name = request.intra_node or (gpu.nvlink if gpu else "nvlink4")
    link = hardware.INTRA_NODE_LINKS.get(link_name)
    if link is None:
        problems.append(InputProblem(ARGS, "--intra-node", f"unknown link {link_name!r}; known: "
                                     f"{', '.join(hardware.INTRA_NODE_LINKS)}"))
    if problems or gpu is None or fabric is None or link is None or not nodes:
        return None
    hcas = hcas or per_node
    bandwidth = sizing.nominal_bandwidth(link, fabric, hcas)
    if request.certification is not None:
        measured = sources.from_certification(request.certification)
        bandwidth = sizing.Bandwidth(measured.intra_node_gbps or bandwidth.intra_node_gbps,
                                     bandwidth.inter_node_gbps,
                                     f"{measured.source}: inside a node {measured.intra_node_gbps} GB/s busbw, "
                                     f"all nodes {measured.all_nodes_gbps} GB/s busbw",
                                     measured_all_gbps=measured.all_nodes_gbps)
    domain = request.nvlink_domain or gpu.nvlink_domain or per_node
    if domain % per_node or (nodes * per_node) % domain:
        problems.append(InputProblem(ARGS, "--nvlink-domain", f"{domain} GPUs is not whole nodes of {per_node} "
                                     f"dividing the cluster's {nodes * per_node}"))
        return None
    return sizing.Cluster(gpu, per_node, nodes, bandwidth, request.memory_reserve, domain)


def build(request: PlanRequest) -> tuple[sizing.Job, sizing.Cluster, int]:
    """Validate the request; every problem is named at once (exit 2)."""
    problems: list[InputProblem] = []
    shape, count = _shape(request, problems)
    if request.precision not in formulas.PRECISIONS:
        problems.append(InputProblem(ARGS, "--precision", f"one of {', '.join(formulas.PRECISIONS)}"))
    if request.optimizer not in formulas.OPTIMIZER_STATE_BYTES:
        problems.append(InputProblem(ARGS, "--optimizer", f"one of {', '.join(formulas.OPTIMIZER_STATE_BYTES)}"))
    if request.zero_stage not in (0, 1, 2, 3):
        problems.append(InputProblem(ARGS, "--zero-stage", "0, 1, 2 or 3"))
    if request.mfu is not None and not 0 < request.mfu <= 1:
        problems.append(InputProblem(ARGS, "--mfu", f"a fraction in (0, 1], got {request.mfu}"))
    if not 0 <= request.overlap <= 1:
        problems.append(InputProblem(ARGS, "--overlap", f"a fraction in [0, 1], got {request.overlap}"))
    _positive(problems, sequence=request.sequence, micro_batch=request.micro_batch,
              global_batch=request.global_batch, tensor_parallel=request.tensor_parallel,
              pipeline_parallel=request.pipeline_parallel, data_parallel=request.data_parallel,
              nodes=request.nodes, gpus=request.gpus, gpus_per_node=request.gpus_per_node,
              hcas_per_node=request.hcas_per_node, checkpoint_every=request.checkpoint_every,
              virtual_stages=request.virtual_stages, context_parallel=request.context_parallel,
              expert_parallel=request.expert_parallel,
              nvlink_domain=request.nvlink_domain)
    if request.tokens:
        try:
            parse_count(request.tokens)
        except ValueError as error:
            problems.append(InputProblem(ARGS, "--tokens", str(error).replace("parameter count", "token count")))
    if request.checkpoint_every and request.certification is None:
        problems.append(InputProblem(ARGS, "--checkpoint-every", "the overhead needs measured save times: give "
                                     "--certification FILE (a certification with the storage part)"))
    cluster = _cluster(request, problems) if not problems else None
    if problems or shape is None or cluster is None:
        raise InputError(problems)
    parameters = count or float(shape.parameters)
    active = parameters * shape.active_parameters / shape.parameters
    job = sizing.Job(shape, parameters, active, request.sequence, request.micro_batch, request.precision,
                     request.optimizer, request.zero_stage, request.checkpointing, request.mfu, request.overlap,
                     request.flash_attention, request.selective_recompute, request.sequence_parallel)
    global_batch = request.global_batch or default_global_batch(request.sequence, request.micro_batch)
    if request.tensor_parallel and cluster.domain % request.tensor_parallel:
        problems.append(InputProblem(ARGS, "--tensor-parallel", f"{request.tensor_parallel} does not divide the "
                                     f"{cluster.domain} GPUs of an NVLink domain (tensor parallelism stays inside "
                                     "it)"))
    if request.sequence % request.context_parallel:
        problems.append(InputProblem(ARGS, "--context-parallel", f"{request.context_parallel} does not divide the "
                                     f"sequence of {request.sequence} tokens"))
    if request.expert_parallel > 1 and shape.experts % request.expert_parallel:
        problems.append(InputProblem(ARGS, "--expert-parallel", f"{request.expert_parallel} does not divide the "
                                     f"model's {shape.experts} expert(s)"))
    if request.precision == "fp8" and not cluster.gpu.fp8_dense_tflops:
        problems.append(InputProblem(ARGS, "--precision", f"{cluster.gpu.name} has no fp8 Tensor Cores"))
    if request.tensor_parallel and shape.heads % request.tensor_parallel:
        problems.append(InputProblem(ARGS, "--tensor-parallel", f"{request.tensor_parallel} does not divide the "
                                     f"model's {shape.heads} attention heads"))
    if request.pipeline_parallel and request.pipeline_parallel > shape.layers:
        problems.append(InputProblem(ARGS, "--pipeline-parallel", f"more stages than the model's {shape.layers} "
                                     "layers"))
    if problems:
        raise InputError(problems)
    return job, cluster, global_batch


def _throughput(request: PlanRequest, cluster: sizing.Cluster, chosen: sizing.Evaluation) -> dict:
    """The recommended layout in the units architects plan with: tokens per second, model
    TFLOP/s per GPU (6 x active parameters per token), and for --tokens the days and GPU-hours."""
    step_s = chosen.step_time_ms / 1e3
    tokens_per_s = chosen.tokens_per_step / step_s if step_s else 0.0
    result: dict = {"tokens_per_s": tokens_per_s,
                    "model_tflops_per_gpu": chosen.predicted_mfu * cluster.gpu.bf16_dense_tflops}
    if request.tokens:
        budget = parse_count(request.tokens)
        seconds = budget / tokens_per_s if tokens_per_s else float("inf")
        result.update({"tokens": budget, "days": seconds / 86400, "gpu_hours": seconds / 3600 * cluster.gpus})
    return result


def _advice(request: PlanRequest) -> str:
    """What the user has not tried yet, of what lowers memory per GPU."""
    options = []
    if request.zero_stage < 3:
        options.append(f"a higher --zero-stage (now {request.zero_stage})")
    if not request.checkpointing:
        options.append("--checkpointing")
    if request.micro_batch > 1:
        options.append(f"a smaller --micro-batch (now {request.micro_batch})")
    if request.context_parallel == 1 and request.sequence >= 8192:
        options.append("--context-parallel (each sequence's activations split)")
    fixed = [name for name, value in (("--tensor-parallel", request.tensor_parallel),
                                      ("--pipeline-parallel", request.pipeline_parallel),
                                      ("--data-parallel", request.data_parallel)) if value]
    if fixed:
        options.append(f"letting plan choose {' and '.join(fixed)}")
    options.append("a shorter --sequence")
    options.append("more GPUs")
    return ", ".join(options[:-1]) + " or " + options[-1]


def _checkpoint(request: PlanRequest, job: sizing.Job, cluster: sizing.Cluster) -> dict:
    """The checkpoint's size and shards; with a certification's storage figures, its save and load times."""
    target = checkpoint.checkpoint_of(job.shape.name, job.parameters, cluster.gpus, job.precision, job.optimizer)
    document: dict = {**target.as_dict(), "per_node_bytes": target.per_node_bytes(cluster.nodes)}
    if request.certification is not None:
        measured = sources.storage_from_certification(request.certification)
        if measured is None:
            if request.checkpoint_every:
                raise InputError([InputProblem(str(request.certification), "storage", "holds no checkpoint "
                                               "storage measurement for --checkpoint-every (run the storage part)")])
            return document
        per_node = target.per_node_bytes(cluster.nodes)
        document["save"] = {
            "source": measured.source, "write_gbps_per_node": measured.write_gbps,
            "read_gbps_per_node": measured.read_gbps,
            "save_s": checkpoint.transfer_seconds(per_node, measured.write_gbps),
            "load_s": checkpoint.transfer_seconds(per_node, measured.read_gbps),
            "note": f"each of {cluster.nodes} nodes writes {per_node / 1e9:.4g} GB at the slowest node's bandwidth "
                    f"measured with {measured.nodes} nodes at once; a filesystem already at its aggregate limit "
                    "will not scale to more nodes"}
    return document


def plan(request: PlanRequest) -> dict:
    """The sizing document. Raises InputError for bad input and DoesNotFit when no layout holds the job."""
    job, cluster, global_batch = build(request)
    layouts = sizing.candidate_layouts(job, cluster, global_batch, request.tensor_parallel,
                                       request.pipeline_parallel, request.data_parallel, request.virtual_stages,
                                       request.context_parallel, request.expert_parallel)
    if not layouts:
        raise InputError([InputProblem(ARGS, "--global-batch", f"no layout of {cluster.gpus} GPUs (tensor "
                                       f"{request.tensor_parallel or 'any'}, pipeline "
                                       f"{request.pipeline_parallel or 'any'}, data {request.data_parallel or 'any'})"
                                       f" divides a global batch of {global_batch} sequences into micro-batches of "
                                       f"{request.micro_batch}")])
    evaluations = [sizing.evaluate(job, cluster, layout) for layout in layouts]
    chosen = sizing.recommend(evaluations)
    shape = job.shape
    document: dict = {
        "model": {"name": shape.name, "source": shape.source, "parameters": job.parameters,
                  "active_parameters": job.active_parameters, "parameter_formula": shape.formula,
                  "layers": shape.layers, "hidden": shape.hidden, "heads": shape.heads, "vocab": shape.vocab,
                  "experts": shape.experts, "experts_per_token": shape.experts_per_token},
        "training": {"sequence": job.sequence, "micro_batch": job.micro_batch, "global_batch": global_batch,
                     "precision": job.precision, "optimizer": job.optimizer, "zero_stage": job.zero_stage,
                     "activation_checkpointing": job.checkpointing, "flash_attention": job.flash_attention,
                     "recompute": job.recompute, "sequence_parallel": job.sequence_parallel,
                     "virtual_stages": request.virtual_stages, "context_parallel": request.context_parallel,
                     "expert_parallel": request.expert_parallel,
                     "global_batch_tokens": global_batch * job.sequence},
        "cluster": {"gpu": cluster.gpu.name, "gpu_source": cluster.gpu.source, "gpu_memory_gb": cluster.gpu.memory_gb,
                    "usable_memory_gb": round(cluster.usable_memory_gb, 2),
                    "memory_reserve": cluster.memory_reserve, "bf16_dense_tflops": cluster.gpu.bf16_dense_tflops,
                    "memory_bandwidth_tbps": cluster.gpu.memory_bandwidth_tbps, "gpus_per_node": cluster.gpus_per_node,
                    "nvlink_domain": cluster.domain,
                    "nodes": cluster.nodes, "gpus": cluster.gpus, "bandwidth": cluster.bandwidth.source},
        "assumptions": {"mfu": job.mfu, "compute_model": compute.constants(cluster.gpu) if job.mfu is None else None,
                        "overlap": job.overlap,
                        "overlap_meaning": "fraction of the last micro-batch's backward pass (2/3 of its compute) "
                                           "during which gradient traffic runs hidden"},
        "checkpoint": _checkpoint(request, job, cluster),
        "candidates": [{**e.layout.as_dict(), "memory_gb": round(e.memory_total_gb, 2), "fits": e.fits,
                        "step_time_ms": round(e.step_time_ms, 3), "predicted_mfu": round(e.predicted_mfu, 4)}
                       for e in evaluations],
    }
    if chosen is None:
        smallest = min(evaluations, key=lambda e: e.memory_total_gb)
        document["fits"] = False
        document["closest"] = smallest.as_dict()
        document["verdict"] = (f"does not fit in GPU memory at any layout of {cluster.gpus} {cluster.gpu.name}: the "
                               f"smallest ({smallest.layout.description}) needs {smallest.memory_total_gb:.1f} GB per "
                               f"GPU of {cluster.usable_memory_gb:.1f} GB usable; try {_advice(request)}")
        raise DoesNotFit(document)
    limit = sizing.scaling_limit(job, cluster, chosen.layout, global_batch)
    other = formulas.activation_memory(shape.layers, shape.hidden, shape.heads, shape.vocab, job.sequence,
                                       job.micro_batch, chosen.layout.tensor, not job.checkpointing,
                                       job.flash_attention, chosen.layout.pipeline, chosen.layout.micro_batches)[0]
    current = next(q.value for q in chosen.memory if q.name == "activations")
    document["activations_other_mode"] = {
        **other.as_dict(), "checkpointing": not job.checkpointing,
        "memory_total_gb": round(chosen.memory_total_gb - current + other.value, 2)}
    document["throughput"] = _throughput(request, cluster, chosen)
    save = document["checkpoint"].get("save")
    if save and request.checkpoint_every:
        overhead = checkpoint.overhead(save["save_s"], request.checkpoint_every, chosen.step_time_ms / 1e3)
        save["every_steps"] = request.checkpoint_every
        save["overhead"] = overhead.as_dict()
    document.update({
        "fits": True, "recommended": chosen.as_dict(), "scaling_limit": limit.as_dict(),
        "heuristics": sizing.heuristics(job, cluster, chosen),
        "verdict": (f"fits: {chosen.layout.description}, {chosen.memory_total_gb:.1f} of "
                    f"{cluster.usable_memory_gb:.1f} GB per GPU, predicted MFU {chosen.predicted_mfu:.1%}"),
    })
    return document
