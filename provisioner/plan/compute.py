"""How long one micro-batch takes on one pipeline stage, from the layer's shapes and the GPU.

The model (its constants fitted to published trainings, `tests/fixtures/plan/published.yaml`):
- the matrix multiplications (the layer's GEMMs, the attention core, the logits) at a fixed share
  of the GPU's dense peak, `GEMM_SHARE`; a full recomputation runs the forward pass twice;
- the memory-bound operations between them (layer norms, activation functions, dropout, bias and
  residual adds, the softmax of unfused attention) at the GPU's memory bandwidth: bytes per
  element of the layer's s·b·h activations, divided among the tensor-parallel ranks only with
  sequence parallelism (without it every rank runs them on the whole sequence); and a fixed
  time per layer (kernel launches);
- tensor parallelism's all-reduces (or all-gathers and reduce-scatters) over NVLink, not hidden
  behind compute (Megatron-LM's 2021-2022 schedules).
Model FLOPs (the MFU numerator) are the PaLM paper's (Chowdhery et al. 2022, appendix B):
6 × the weights a token multiplies + 12·L·s·h for attention, whatever is recomputed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from provisioner.plan.formulas import Quantity
from provisioner.plan.hardware import Gpu
from provisioner.plan.models import ModelShape

# The constants below were fitted together, by a grid search, to the 20 published trainings of
# tests/fixtures/plan/published.yaml (A100: Megatron-LM 2021-2022; H100: Llama 3); with them every
# row's step time and MFU is within 11 % of the published figure (bench/plan_published.py).
#
# The share of the dense peak the matrix multiplications reach. Fitted on A100 and H100 alike, the
# two came out the same; Blackwell has no published training to fit and takes it too.
GEMM_SHARE = 0.70
# Bytes the memory-bound operations move per element of the layer's s·b·h activations, forward and
# backward together (16-bit activations; dropout masks, the MLP's 4h-wide activations).
ELEMENTWISE_BYTES = 80.0
# Bytes per attention score (a·s² per sequence) of an unfused softmax, forward and backward:
# Korthikanti et al.'s 5 bytes stored per score, written once and read back.
SCORE_BYTES = 10.0
# Fixed time per layer and micro-batch, forward and backward: kernel launches and the small
# operations between them, which do not shrink with the layer.
LAYER_OVERHEAD_MS = 1.5
# The share of the NVLink line rate a tensor-parallel collective reaches.
NVLINK_SHARE = 1.0

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class StageWork:
    """What one GPU does per micro-batch: its layers, whether it holds the logits."""

    layers: float
    logits: bool


def model_flops_per_token(shape: ModelShape, active_parameters: float, sequence: int) -> float:
    """6 × the weights a token multiplies (the input embedding is a lookup) + 12·L·s·h of attention."""
    multiplied = active_parameters - (0 if shape.tied_embeddings else shape.vocab * shape.hidden)
    return 6 * multiplied + 12 * shape.layers * sequence * shape.hidden


def stage_work(shape: ModelShape, pipeline: int) -> StageWork:
    """The busiest stage: L/p layers, rounded up where they do not divide; the last stage also
    holds the logits, and is the busiest where they outweigh the rounding."""
    if pipeline == 1:
        return StageWork(shape.layers, True)
    even = shape.layers / pipeline
    logits_in_layers = shape.vocab * shape.hidden / shape.active_parameters_per_layer
    if math.ceil(even) >= even + logits_in_layers:
        return StageWork(math.ceil(even), False)
    return StageWork(even, True)


@dataclass(frozen=True)
class Work:
    """What one GPU computes per micro-batch: its model slice, its share of the sequence, and how."""

    shape: ModelShape
    sequence: int
    micro_batch: int
    tensor: int
    stage: StageWork
    recompute: str = "none"
    flash_attention: bool = True
    sequence_parallel: bool = True
    context: int = 1
    fp8: bool = False
    expert_parallel: int = 1


def micro_batch_time(work: Work, gpu: Gpu, nvlink_gbps: float, context_gbps: float = 0.0,
                     expert_gbps: float = 0.0) -> list[Quantity]:
    """The parts of one micro-batch's forward and backward pass on the busiest stage, in ms.

    With context parallelism (c) each GPU holds s/c of the sequence: its layers' GEMMs shrink by
    c, its queries still meet every key, and the keys and values go round the ring (c-1 chunks
    forward, their gradients back) over context_gbps, behind the attention core's compute."""
    shape, b, t, c = work.shape, work.micro_batch, work.tensor, work.context
    s, local, h, a = work.sequence, work.sequence / c, shape.hidden, shape.heads
    layers = work.stage.layers
    share = GEMM_SHARE
    layer_peak = (gpu.fp8_dense_tflops if work.fp8 else gpu.bf16_dense_tflops) * 1e12 * share
    peak = gpu.bf16_dense_tflops * 1e12 * share
    passes = 4 if work.recompute == "full" else 3
    # Collectives per layer that move the layer's activations (tensor parallelism's, the experts'
    # all-to-alls): 2 forward, 2 backward, 2 more when the forward pass is recomputed.
    collectives = 4 + (2 if work.recompute == "full" else 0)
    layer_gemm = 2 * local * b * shape.active_parameters_per_layer / t
    # The attention core (QK^T and AV, 4·s²·b·h forward; its s/c queries against all s keys); a
    # causal fused kernel skips the masked half.
    core = 4 * local * s * b * h / t * (0.5 if work.flash_attention else 1.0)
    core_passes = passes + (1 if work.recompute == "selective" else 0)
    logits = 2 * local * b * shape.vocab * h / t if work.stage.logits else 0.0
    layer_ms = layers * layer_gemm * passes / layer_peak * 1e3
    core_ms = layers * core * core_passes / peak * 1e3
    gemm_ms = layer_ms + core_ms + logits * 3 / peak * 1e3
    precision = f"fp8 {gpu.fp8_dense_tflops:g}" if work.fp8 else f"{gpu.bf16_dense_tflops:g}"
    parts = [Quantity("matrix multiplications", gemm_ms, "ms",
                      "L_stage × 2·(s/c)·b·P_layer/t × passes / (peak × GEMM share) + attention core and logits "
                      "at the bf16 peak",
                      f"layers {layer_ms:.4g} ms ({precision} TFLOP/s × {share:g}) + attention core {core_ms:.4g} ms"
                      f" + logits {gemm_ms - layer_ms - core_ms:.4g} ms = {gemm_ms:.4g} ms")]
    divided = t if work.sequence_parallel else 1
    element_bytes = ELEMENTWISE_BYTES * local * b * h / divided * (4 / 3 if work.recompute == "full" else 1.0)
    if not work.flash_attention:
        element_bytes += SCORE_BYTES * a * local * s * b / t * (4 / 3 if work.recompute != "none" else 1.0)
    element_bytes *= layers
    element_ms = element_bytes / (gpu.memory_bandwidth_tbps * 1e12) * 1e3 + LAYER_OVERHEAD_MS * layers
    parts.append(Quantity("memory-bound operations", element_ms, "ms",
                          "L_stage × (bytes/element × (s/c)·b·h/(t if sequence parallel) [+ score bytes × "
                          "a·(s/c)·s·b/t]) / memory bandwidth + per-layer overhead",
                          f"{element_bytes / 1e9:.4g} GB / {gpu.memory_bandwidth_tbps:g} TB/s + {layers:g} × "
                          f"{LAYER_OVERHEAD_MS:g} ms = {element_ms:.4g} ms"))
    if t > 1:
        volume = layers * collectives * 2 * (t - 1) / t * 2 * local * b * h
        tp_ms = volume / (nvlink_gbps * 1e9 * NVLINK_SHARE) * 1e3
        parts.append(Quantity("tensor-parallel collectives (exposed)", tp_ms, "ms",
                              "L_stage × calls × 2(t-1)/t × 2·(s/c)·b·h / (NVLink × share)",
                              f"{layers:g} × {collectives} × 2·({t}-1)/{t} × 2·{local:g}·{b}·{h} B / ({nvlink_gbps:g} "
                              f"GB/s × {NVLINK_SHARE:g}) = {tp_ms:.4g} ms"))
    if c > 1:
        kv_width = max(shape.kv_heads / t, 1) * (h // a)
        chunks = (c - 1) * (6 + (2 if work.recompute == "full" else 0))
        ring_bytes = layers * chunks * local * b * kv_width * 2
        ring_ms = ring_bytes / (context_gbps * 1e9) * 1e3
        exposed = max(0.0, ring_ms - core_ms)
        parts.append(Quantity("context-parallel ring (exposed)", exposed, "ms",
                              "max(0, L_stage × (c-1) × 6 × (s/c)·b·kv_heads/t·head_dim·2 B / link - attention core)",
                              f"max(0, {ring_bytes / 1e9:.4g} GB / {context_gbps:g} GB/s = {ring_ms:.4g} ms - "
                              f"{core_ms:.4g} ms) = {exposed:.4g} ms"))
    e = work.expert_parallel
    if shape.experts > 1 and e > 1:
        # Each token goes to its k experts and comes back (dispatch and combine), forward and
        # backward: 4 all-to-alls of the tokens this GPU holds, (e-1)/e of them leaving it.
        tokens = local * b / (t if work.sequence_parallel else 1)
        a2a_bytes = layers * collectives * tokens * shape.experts_per_token * h * 2 * (e - 1) / e
        a2a_ms = a2a_bytes / (expert_gbps * 1e9) * 1e3
        parts.append(Quantity("expert all-to-all (exposed)", a2a_ms, "ms",
                              "L_stage × calls × tokens × k × h × 2 B × (e-1)/e / link",
                              f"{layers:g} × {collectives} × {tokens:g} × {shape.experts_per_token} × {h} × 2 B × "
                              f"({e}-1)/{e} / {expert_gbps:g} GB/s = {a2a_ms:.4g} ms"))
    return parts


def constants(gpu: Gpu) -> dict[str, float | str]:
    """The compute model's constants for this GPU, as the plan shows them."""
    return {"gemm_share": GEMM_SHARE, "elementwise_bytes": ELEMENTWISE_BYTES,
            "score_bytes": SCORE_BYTES, "layer_overhead_ms": LAYER_OVERHEAD_MS, "nvlink_share": NVLINK_SHARE,
            "fitted_to": "tests/fixtures/plan/published.yaml (Narayanan 2021, Korthikanti 2022, Llama 3)"}
