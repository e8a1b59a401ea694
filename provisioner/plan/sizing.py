"""Evaluate a parallelism layout, recommend one, and find where communication eats the gains."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from provisioner.plan import compute, formulas
from provisioner.plan.formulas import Quantity
from provisioner.plan.hardware import FABRICS, Fabric, Gpu, Link
from provisioner.plan.models import ModelShape


@dataclass(frozen=True)
class Bandwidth:
    """What the collectives get: per-GPU intra-node GB/s, per-node inter-node GB/s, or a measured busbw."""

    intra_node_gbps: float
    inter_node_gbps: float
    source: str
    measured_all_gbps: float | None = None  # busbw of an all-nodes all-reduce (certification), if measured


def nominal_bandwidth(link: Link, fabric: Fabric, hcas: int) -> Bandwidth:
    """The nominal figures: the GPU's NVLink (or PCIe), and the node's HCAs at the fabric's rate."""
    return Bandwidth(link.gbps_per_gpu, fabric.gbyte_per_port * hcas,
                     f"nominal: {link.name} {link.gbps_per_gpu:g} GB/s per GPU; {hcas} x "
                     f"{fabric.description} = {fabric.gbyte_per_port * hcas:g} GB/s per node")


@dataclass(frozen=True)
class Job:
    """What is trained and how (everything but the layout)."""

    shape: ModelShape
    parameters: float
    active_parameters: float
    sequence: int
    micro_batch: int
    precision: str
    optimizer: str
    zero_stage: int
    checkpointing: bool
    mfu: float | None  # None: the compute model; a fraction: a flat MFU (the override)
    overlap: float
    flash_attention: bool = True
    selective_recompute: bool = False
    sequence_parallel: bool = True

    @property
    def recompute(self) -> str:
        return "full" if self.checkpointing else "selective" if self.selective_recompute else "none"

    @property
    def scores_stored(self) -> bool:
        """Unfused attention keeps its a·s² scores for the backward pass unless recomputed."""
        return not (self.flash_attention or self.selective_recompute)


@dataclass(frozen=True)
class Cluster:
    gpu: Gpu
    gpus_per_node: int
    nodes: int
    bandwidth: Bandwidth
    memory_reserve: float = 0.10  # CUDA context, NCCL buffers, allocator fragmentation
    nvlink_domain: int = 0  # GPUs one NVLink fabric joins (GB200 NVL72: 72); 0: the node

    @property
    def domain(self) -> int:
        return self.nvlink_domain or self.gpus_per_node

    @property
    def nic_gbps_per_gpu(self) -> float:
        return self.bandwidth.inter_node_gbps / self.gpus_per_node

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def usable_memory_gb(self) -> float:
        return self.gpu.memory_gb * (1 - self.memory_reserve)


@dataclass(frozen=True)
class Layout:
    tensor: int
    pipeline: int
    data: int
    micro_batches: int
    virtual_stages: int = 1  # interleaved 1F1B: each GPU holds this many chunks of L/(p·v) layers
    context: int = 1  # context parallelism: each GPU holds s/c of every sequence
    expert: int = 1  # expert parallelism: the experts spread over this many of the data-parallel ranks

    @property
    def description(self) -> str:
        """tensor 8 x context 2 x pipeline 16 (2 virtual stages) x data 32, the degrees above 1 beyond the three."""
        parts = [f"tensor {self.tensor}"] + ([f"context {self.context}"] if self.context > 1 else [])
        parts.append(f"pipeline {self.pipeline}" + (f" ({self.virtual_stages} virtual stages)"
                                                    if self.virtual_stages > 1 else ""))
        parts.append(f"data {self.data}" + (f" (experts over {self.expert})" if self.expert > 1 else ""))
        return " x ".join(parts)

    def as_dict(self) -> dict:
        return {"description": self.description,
                "tensor_parallel": self.tensor, "context_parallel": self.context, "expert_parallel": self.expert,
                "pipeline_parallel": self.pipeline, "data_parallel": self.data,
                "micro_batches": self.micro_batches, "virtual_stages": self.virtual_stages}


@dataclass
class Evaluation:
    layout: Layout
    memory: list[Quantity]
    memory_total_gb: float
    fits: bool
    communication: list[Quantity]
    compute: Quantity
    bubble: Quantity
    step_time_ms: float
    exposed_communication_ms: float
    scaling_efficiency: float
    predicted_mfu: float
    tokens_per_step: int
    gradient_bytes: float
    gradient_sync_ms: float
    gradients: Quantity
    micro_batch_parts: list[Quantity] = field(default_factory=list)
    optimizer: Quantity | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "layout": self.layout.as_dict(), "memory": [q.as_dict() for q in self.memory],
            "memory_total_gb": round(self.memory_total_gb, 2), "fits": self.fits,
            "gradient_bytes_per_step": self.gradient_bytes, "gradients": self.gradients.as_dict(),
            "communication": [q.as_dict() for q in self.communication], "compute": self.compute.as_dict(),
            "pipeline_bubble": self.bubble.as_dict(), "step_time_ms": round(self.step_time_ms, 3),
            "exposed_communication_ms": round(self.exposed_communication_ms, 3),
            "scaling_efficiency": round(self.scaling_efficiency, 4), "predicted_mfu": round(self.predicted_mfu, 4),
            "tokens_per_step": self.tokens_per_step, "notes": self.notes,
            "micro_batch": [q.as_dict() for q in self.micro_batch_parts],
            "optimizer_step": self.optimizer.as_dict() if self.optimizer else None,
        }


def _data_parallel_sync(job: Job, cluster: Cluster, layout: Layout, nbytes: float) -> list[Quantity]:
    """Gradient synchronisation per step over the data-parallel group, per level of the hierarchy."""
    volume = 3.0 if job.zero_stage >= 3 else 2.0
    what = ("ZeRO-3 gather/gather/reduce-scatter, each micro-batch" if job.zero_stage >= 3
            else "gradient all-reduce")
    # Gradients are reduced over the data- and context-parallel ranks that hold the same weights.
    d, bandwidth = layout.data * layout.context, cluster.bandwidth
    if d < 2:
        return []
    inside = "the node" if cluster.domain == cluster.gpus_per_node else "the NVLink domain"
    per_domain = max(1, min(d, cluster.domain // layout.tensor))
    domains = -(-d // per_domain)
    if bandwidth.measured_all_gbps is not None and domains > 1:
        return [formulas.ring_all_reduce_time(nbytes, d, bandwidth.measured_all_gbps, volume,
                                              f"{what}, all levels (measured busbw)")]
    steps = []
    if per_domain > 1:
        steps.append(formulas.ring_all_reduce_time(nbytes, per_domain, bandwidth.intra_node_gbps, volume,
                                                   f"{what}, inside {inside} ({per_domain} GPUs)"))
    if domains > 1:
        share = cluster.nic_gbps_per_gpu * per_domain
        place = "nodes" if cluster.domain == cluster.gpus_per_node else "NVLink domains"
        steps.append(formulas.ring_all_reduce_time(nbytes, domains, share, volume,
                                                   f"{what}, across {domains} {place}"))
    return steps


def _micro_batch(job: Job, cluster: Cluster, layout: Layout) -> list[Quantity]:
    """One micro-batch on the busiest stage: the compute model, or the flat MFU given instead."""
    if job.mfu is None:
        work = compute.Work(job.shape, job.sequence, job.micro_batch, layout.tensor,
                            compute.stage_work(job.shape, layout.pipeline), job.recompute, job.flash_attention,
                            job.sequence_parallel, layout.context, job.precision == "fp8", layout.expert)
        # A context-parallel ring, an expert-parallel all-to-all: over NVLink while the group stays in
        # the NVLink domain, else over each GPU's share of the node's NICs.
        def link(span: int) -> float:
            return cluster.bandwidth.intra_node_gbps if span <= cluster.domain else cluster.nic_gbps_per_gpu
        group = layout.tensor * layout.context
        return compute.micro_batch_time(work, cluster.gpu, cluster.bandwidth.intra_node_gbps, link(group),
                                        link(group * layout.expert))
    tokens = job.micro_batch * job.sequence * layout.data
    flat = formulas.compute_time(job.active_parameters, tokens, cluster.gpus // layout.pipeline,
                                 cluster.gpu.bf16_dense_tflops, job.mfu, job.checkpointing)
    return [Quantity("compute at the given MFU", flat.value, "ms", flat.formula, flat.worked)]


def _optimizer_step(job: Job, cluster: Cluster, layout: Layout) -> Quantity:
    """The optimizer reads and writes its states, the master copy, the gradients and the weights
    of its shard once per step, at the GPU's memory bandwidth."""
    shard = job.parameters / (layout.tensor * layout.pipeline) / (layout.data * layout.context
                                                                  if job.zero_stage >= 1 else 1)
    per_parameter = 2 * formulas.optimizer_bytes(job.precision, job.optimizer) + 2 * formulas.PRECISIONS[
        job.precision].gradient_bytes
    seconds = shard * per_parameter / (cluster.gpu.memory_bandwidth_tbps * 1e12)
    return Quantity("optimizer step", seconds * 1e3, "ms", "P shard × (2·K + 2·gradient bytes) / memory bandwidth",
                    f"{shard:.4g} × {per_parameter} B / {cluster.gpu.memory_bandwidth_tbps:g} TB/s = "
                    f"{seconds * 1e3:.4g} ms")


def evaluate(job: Job, cluster: Cluster, layout: Layout) -> Evaluation:
    """Memory, time and efficiency of one layout."""
    shape, model_parallel = job.shape, layout.tensor * layout.pipeline
    p, m, v = layout.pipeline, layout.micro_batches, layout.virtual_stages
    expert_parameters = job.parameters * shape.expert_parameters / shape.parameters
    memory = formulas.model_state_memory(job.parameters, model_parallel, layout.data * layout.context,
                                         job.zero_stage, job.precision, job.optimizer, expert_parameters,
                                         layout.expert)
    memory += formulas.activation_memory(shape.layers, shape.hidden, shape.heads, shape.vocab,
                                         job.sequence // layout.context, job.micro_batch, layout.tensor,
                                         job.checkpointing, not job.scores_stored, p, m, v)
    total = sum(q.value for q in memory)
    held = job.parameters - expert_parameters + expert_parameters / layout.expert
    gradient_bytes = held / model_parallel * formulas.PRECISIONS[job.precision].gradient_bytes
    tokens = job.micro_batch * job.sequence * layout.data * m
    parts = _micro_batch(job, cluster, layout)
    micro = sum(q.value for q in parts)
    tensor_traffic = [q for q in parts if q.name.startswith("tensor-parallel")]
    exposed_tp = sum(q.value for q in tensor_traffic)
    computing = micro - exposed_tp
    compute_total = Quantity("compute", computing * m, "ms",
                             "micro-batches × (one micro-batch without the exposed tensor-parallel collectives)",
                             f"{m} × {computing:.4g} ms = {computing * m:.4g} ms")
    sync = _data_parallel_sync(job, cluster, layout, gradient_bytes)
    bubble = formulas.pipeline_bubble(p, m, v)
    pipeline_ms = micro * (m + (p - 1) / v)
    sync_time = sum(q.value for q in sync)
    if job.zero_stage >= 3:
        # ZeRO-3 gathers the weights before each micro-batch's forward and backward pass and scatters
        # its gradients after it: every micro-batch, prefetched behind a share of its compute.
        exposed_sync = m * max(0.0, sync_time - job.overlap * computing)
        sync_time *= m
    else:
        # Gradient traffic hides behind the last micro-batch's backward pass (2/3 of its compute), in part.
        exposed_sync = max(0.0, sync_time - job.overlap * (2 / 3) * computing)
    optimizer = _optimizer_step(job, cluster, layout)
    step = pipeline_ms + exposed_sync + optimizer.value
    model_flops = tokens * compute.model_flops_per_token(shape, job.active_parameters, job.sequence)
    mfu = model_flops / (step / 1e3 * cluster.gpus * cluster.gpu.bf16_dense_tflops * 1e12) if step else 0.0
    notes = []
    if job.shape.experts > 1 and layout.expert == 1:
        notes.append("mixture of experts: every data-parallel rank holds every expert (--expert-parallel "
                     "spreads them); compute counts the active ones")
    return Evaluation(
        layout=layout, memory=memory, memory_total_gb=total, fits=total <= cluster.usable_memory_gb,
        communication=tensor_traffic + sync, compute=compute_total,
        bubble=bubble, step_time_ms=step, exposed_communication_ms=exposed_sync + exposed_tp * m,
        scaling_efficiency=compute_total.value / step if step else 1.0,
        predicted_mfu=mfu, tokens_per_step=tokens, micro_batch_parts=parts, optimizer=optimizer,
        gradient_bytes=gradient_bytes, gradient_sync_ms=sync_time, notes=notes,
        gradients=Quantity("gradient bytes per step (per GPU, each data-parallel group)", gradient_bytes / 1e6, "MB",
                           "P held/(t·p) × gradient bytes",
                           f"{held:.4g}/{model_parallel} × "
                           f"{formulas.PRECISIONS[job.precision].gradient_bytes} = {gradient_bytes / 1e6:.4g} MB"))


def candidate_layouts(job: Job, cluster: Cluster, global_batch: int, tensor: int | None = None,
                      pipeline: int | None = None, data: int | None = None,
                      virtual_stages: int = 1, context: int = 1, expert: int = 1) -> list[Layout]:
    """Every layout of the cluster's GPUs: tensor parallel inside an NVLink domain (dividing it and
    the heads), context parallel as given, pipeline stages, data parallel; pipelines interleaved
    over virtual_stages chunks where there is a layer for each."""
    layouts = []
    tensors = [tensor] if tensor else [t for t in range(1, cluster.domain + 1)
                                       if cluster.domain % t == 0 and job.shape.heads % t == 0
                                       and (t & (t - 1) == 0 or cluster.domain > cluster.gpus_per_node)]
    for t in tensors:
        group = t * context
        pipelines = [pipeline] if pipeline else [p for p in range(1, job.shape.layers + 1)
                                                 if cluster.gpus % (group * p) == 0]
        for p in pipelines:
            if cluster.gpus % (group * p):
                continue
            d = cluster.gpus // (group * p)
            if data and d != data:
                continue
            if global_batch % (job.micro_batch * d):
                continue
            v = virtual_stages if p > 1 else 1
            if job.shape.layers < p * v:
                continue  # a chunk of at least one layer per virtual stage (uneven chunks allowed)
            if (d * context) % expert:
                continue
            layouts.append(Layout(t, p, d, global_batch // (job.micro_batch * d), v, context, expert))
    return layouts


def recommend(evaluations: list[Evaluation]) -> Evaluation | None:
    """Pipeline only as deep as memory demands (fewest stages that fit); among those the fastest step."""
    fitting = [e for e in evaluations if e.fits]
    if not fitting:
        return None
    stages = min(e.layout.pipeline for e in fitting)
    pool = [e for e in fitting if e.layout.pipeline == stages]
    return min(pool, key=lambda e: (e.step_time_ms, e.layout.tensor))


@dataclass(frozen=True)
class ScalingLimit:
    gpus: int | None
    efficiency_there: float | None
    reason: str

    def as_dict(self) -> dict:
        return {"gpus": self.gpus, "scaling_efficiency_there": self.efficiency_there, "reason": self.reason}


def _divisors(number: int) -> list[int]:
    small = [d for d in range(1, int(number ** 0.5) + 1) if number % d == 0]
    return sorted(set(small + [number // d for d in small]))


def scaling_limit(job: Job, cluster: Cluster, layout: Layout, global_batch: int) -> ScalingLimit:
    """The smallest GPU count (whole nodes, same tensor/pipeline degrees and global batch) at which less
    than half of a step computes (exposed communication, or the pipeline bubble as micro-batches per
    rank run out); or the batch's own limit on data parallelism. Every feasible count is tried: each
    data-parallel degree that divides the batch's micro-batches and fills whole nodes."""
    group = layout.tensor * layout.context * layout.pipeline
    max_data = global_batch // job.micro_batch
    last = None
    for d in _divisors(max_data):
        gpus = d * group
        if gpus % cluster.gpus_per_node or (d * layout.context) % layout.expert:
            continue
        trial = replace(cluster, nodes=gpus // cluster.gpus_per_node)
        result = evaluate(job, trial, Layout(layout.tensor, layout.pipeline, d, max_data // d,
                                             layout.virtual_stages, layout.context, layout.expert))
        last = result
        if result.scaling_efficiency < 0.5:
            return ScalingLimit(gpus, result.scaling_efficiency,
                                f"from {gpus} GPUs on less than half of each step computes "
                                f"(efficiency {result.scaling_efficiency:.0%}): compute "
                                f"{result.compute.value:.4g} ms, exposed communication "
                                f"{result.exposed_communication_ms:.4g} ms, pipeline bubble "
                                f"{result.bubble.value:.0%}")
    if last is None:
        return ScalingLimit(None, None, "no whole-node layout of this shape fits the global batch")
    gpus = last.layout.data * group
    return ScalingLimit(None, last.scaling_efficiency,
                        f"the global batch ({global_batch} sequences of micro-batch {job.micro_batch}) limits data "
                        f"parallelism to {last.layout.data} ({gpus} GPUs, one micro-batch per rank) before "
                        f"communication or the bubble take half a step (scaling efficiency there "
                        f"{last.scaling_efficiency:.0%})")


def heuristics(job: Job, cluster: Cluster, chosen: Evaluation) -> list[dict]:
    """Widely quoted rules of thumb, computed for this job, labelled as heuristics."""
    rules = []
    sync = chosen.gradient_sync_ms
    single_gpu = chosen.compute.value * cluster.gpus
    if sync > 0:
        rules.append({"name": "optimal GPU count (rule of thumb)",
                      "rule": "compute_time_on_one_GPU / all_reduce_time × 0.85",
                      "value": round(single_gpu / sync * 0.85, 1),
                      "worked": f"{single_gpu:.4g} ms / {sync:.4g} ms × 0.85",
                      "label": "heuristic: ignores overlap, the hierarchy and the batch limit; "
                               "the scaling limit above is the principled estimate"})
    nodes = max(2, 8 // cluster.gpus_per_node if cluster.gpus_per_node < 8 else cluster.nodes)
    fast, slow = FABRICS["ib-ndr"], FABRICS["eth-100"]
    per_node = cluster.gpus_per_node
    outcome = {}
    for fabric in (fast, slow):
        bandwidth = Bandwidth(cluster.bandwidth.intra_node_gbps, fabric.gbyte_per_port * per_node, fabric.name)
        trial = replace(cluster, nodes=nodes, bandwidth=bandwidth)
        layouts = candidate_layouts(job, trial, job.micro_batch * trial.gpus, tensor=1, pipeline=1)
        if layouts:
            outcome[fabric.name] = evaluate(job, trial, layouts[0]).scaling_efficiency
    if len(outcome) == 2:
        rules.append({"name": "Ethernet vs InfiniBand (rule of thumb)",
                      "rule": "inter-node all-reduce time scales with 1/line rate: 100 GbE is 4x slower than NDR",
                      "value": ", ".join(f"{name} {value:.0%}" for name, value in outcome.items()),
                      "worked": f"predicted scaling efficiency, pure data parallel, {nodes} nodes of {per_node} "
                                "GPUs, one port per GPU",
                      "label": "heuristic: nominal line rates (TCP at its share of the line rate)"})
    return rules
