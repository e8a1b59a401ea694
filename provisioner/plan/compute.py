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
  behind compute (Megatron-LM's 2021-2022 schedules; `tp_overlap` takes a share off).
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
# The share of the dense bf16 peak the matrix multiplications reach, per GPU generation (NVLink
# names the generation). Blackwell has no published training to fit: Hopper's share is taken.
GEMM_SHARE = {"nvlink3": 0.70, "nvlink4": 0.70, "nvlink4-h800": 0.70, "nvlink5": 0.70}
DEFAULT_GEMM_SHARE = 0.70
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


def micro_batch_time(shape: ModelShape, sequence: int, micro_batch: int, tensor: int, work: StageWork,
                     gpu: Gpu, nvlink_gbps: float, recompute: str, flash_attention: bool,
                     sequence_parallel: bool = True, tp_overlap: float = 0.0,
                     gemm_share: float | None = None) -> list[Quantity]:
    """The parts of one micro-batch's forward and backward pass on the busiest stage, in ms."""
    s, b, h, a, t = sequence, micro_batch, shape.hidden, shape.heads, tensor
    share = gemm_share if gemm_share is not None else GEMM_SHARE.get(gpu.nvlink, DEFAULT_GEMM_SHARE)
    peak = gpu.bf16_dense_tflops * 1e12 * share
    passes = 4 if recompute == "full" else 3
    layer_gemm = 2 * s * b * shape.active_parameters_per_layer / t
    # The attention core (QK^T and AV, 4·s²·b·h forward); a causal fused kernel skips the masked half.
    core = 4 * s * s * b * h / t * (0.5 if flash_attention else 1.0)
    core_passes = passes + (1 if recompute == "selective" else 0)
    logits = 2 * s * b * shape.vocab * h / t if work.logits else 0.0
    flops = work.layers * (layer_gemm * passes + core * core_passes) + logits * 3
    gemm_ms = flops / peak * 1e3
    parts = [Quantity("matrix multiplications", gemm_ms, "ms",
                      "(L_stage × (2·s·b·P_layer/t × passes + attention core) + logits) / (peak × GEMM share)",
                      f"{flops / 1e12:.4g} TFLOP / ({gpu.bf16_dense_tflops:g} TFLOP/s × {share:g}) = {gemm_ms:.4g} ms")]
    divided = t if sequence_parallel else 1
    element_bytes = ELEMENTWISE_BYTES * s * b * h / divided * (4 / 3 if recompute == "full" else 1.0)
    if not flash_attention:
        element_bytes += SCORE_BYTES * a * s * s * b / t * (4 / 3 if recompute != "none" else 1.0)
    element_bytes *= work.layers
    bandwidth = gpu.memory_bandwidth_tbps * 1e12
    element_ms = element_bytes / bandwidth * 1e3 + LAYER_OVERHEAD_MS * work.layers
    parts.append(Quantity("memory-bound operations", element_ms, "ms",
                          "L_stage × (bytes/element × s·b·h/(t if sequence parallel) [+ score bytes × a·s²·b/t]) "
                          "/ memory bandwidth",
                          f"{element_bytes / 1e9:.4g} GB / {gpu.memory_bandwidth_tbps:g} TB/s = {element_ms:.4g} ms"))
    if t > 1:
        calls = 4 + (2 if recompute == "full" else 0)
        volume = work.layers * calls * 2 * (t - 1) / t * 2 * s * b * h
        tp_ms = volume / (nvlink_gbps * 1e9 * NVLINK_SHARE) * (1 - tp_overlap) * 1e3
        parts.append(Quantity("tensor-parallel collectives (exposed)", tp_ms, "ms",
                              "L_stage × calls × 2(t-1)/t × 2·s·b·h / (NVLink × share) × (1 - overlap)",
                              f"{work.layers:g} × {calls} × 2·({t}-1)/{t} × 2·{s}·{b}·{h} B / ({nvlink_gbps:g} GB/s × "
                              f"{NVLINK_SHARE:g}) × {1 - tp_overlap:g} = {tp_ms:.4g} ms"))
    return parts


def constants(gpu: Gpu) -> dict[str, float | str]:
    """The compute model's constants for this GPU, as the plan shows them."""
    return {"gemm_share": GEMM_SHARE.get(gpu.nvlink, DEFAULT_GEMM_SHARE), "elementwise_bytes": ELEMENTWISE_BYTES,
            "score_bytes": SCORE_BYTES, "layer_overhead_ms": LAYER_OVERHEAD_MS, "nvlink_share": NVLINK_SHARE,
            "fitted_to": "tests/fixtures/plan/published.yaml (Narayanan 2021, Korthikanti 2022, Llama 3)"}
