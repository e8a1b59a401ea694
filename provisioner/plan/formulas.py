"""The sizing formulas, each returning its value with the formula and the numbers put in.

Memory: model states after Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models" (2020); activations after Korthikanti et al., "Reducing Activation Recomputation in
Large Transformer Models" (2022), 16-bit activations, tensor parallelism with sequence parallelism.
Communication: ring collectives, the volume nccl-tests' busbw is defined by (2(n-1)/n per all-reduce).
Compute: 6 x parameters x tokens training FLOPs (Kaplan et al. 2020).
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class Quantity:
    """A computed figure: value, unit, the formula, and the formula with the numbers put in."""

    name: str
    value: float
    unit: str
    formula: str
    worked: str

    def as_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "unit": self.unit, "formula": self.formula,
                "worked": self.worked}


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of weights and gradients, and of the optimizer's states per optimizer."""

    weight_bytes: int
    gradient_bytes: int
    master_bytes: int  # an fp32 copy of the weights kept by mixed precision


# fp8: Transformer Engine's recipe, the layers' GEMMs in fp8 with bf16 weights, gradients and an fp32
# master copy kept (its fp8 copies of the weights are transient).
PRECISIONS = {"bf16": Precision(2, 2, 4), "fp16": Precision(2, 2, 4), "fp8": Precision(2, 2, 4),
              "fp32": Precision(4, 4, 0)}
# Optimizer state bytes per parameter beyond the master copy (fp32 states).
OPTIMIZER_STATE_BYTES = {"adamw": 8, "adam": 8, "sgd": 4, "adam-8bit": 2}


def optimizer_bytes(precision: str, optimizer: str) -> int:
    """K in ZeRO's notation: bytes of optimizer state per parameter (master copy included)."""
    return PRECISIONS[precision].master_bytes + OPTIMIZER_STATE_BYTES[optimizer]


def model_state_memory(parameters: float, model_parallel: int, data_parallel: int, zero_stage: int,
                       precision: str, optimizer: str, expert_parameters: float = 0.0,
                       expert_parallel: int = 1) -> list[Quantity]:
    """Weights, gradients and optimizer states on one GPU under the ZeRO stage (0: plain data parallel).

    With expert parallelism (e) each GPU holds 1/e of the experts' weights; what ZeRO shards over
    the d data-parallel ranks comes to P/(t·p·d) either way (the experts over d/e ranks)."""
    spec = PRECISIONS[precision]
    k = optimizer_bytes(precision, optimizer)
    d, e = data_parallel, expert_parallel
    held = (parameters - expert_parameters + expert_parameters / e) / model_parallel
    shard = parameters / model_parallel
    held_text = (f"P/(t·p) = {parameters:.4g}/{model_parallel}" if e == 1 else
                 f"(P - P_experts + P_experts/e)/(t·p) = ({parameters:.4g} - {expert_parameters:.4g} + "
                 f"{expert_parameters:.4g}/{e})/{model_parallel}")

    def part(name: str, per_param: int, sharded: bool) -> Quantity:
        value = (shard / d if sharded else held) * per_param / GB
        if sharded:
            return Quantity(name, value, "GB", f"P/(t·p) × {per_param} B / d",
                            f"P/(t·p) = {parameters:.4g}/{model_parallel} × {per_param} / {d} = {value:.2f} GB")
        formula = ("P/(t·p)" if e == 1 else "(P - P_experts + P_experts/e)/(t·p)") + f" × {per_param} B"
        return Quantity(name, value, "GB", formula, f"{held_text} × {per_param} = {value:.2f} GB")

    return [part("weights", spec.weight_bytes, zero_stage >= 3),
            part("gradients", spec.gradient_bytes, zero_stage >= 2),
            part("optimizer states", k, zero_stage >= 1)]


def activation_memory(layers: int, hidden: int, heads: int, vocab: int, sequence: int, micro_batch: int,
                      tensor_parallel: int, checkpointing: bool, flash_attention: bool = True,
                      pipeline: int = 1, micro_batches: int = 1, virtual_stages: int = 1) -> list[Quantity]:
    """Activations held by the GPU that holds most, for the backward pass.

    Per layer without recomputation s·b·h/t·(34 + 5·a·s/h) bytes; with full checkpointing each layer
    keeps only its 16-bit input, 2·s·b·h/t, plus one layer's full activations while it is recomputed.
    With 1F1B pipelining the first stage holds min(p, m) micro-batches of its L/p layers (p in
    flight, or every micro-batch when there are fewer); the last stage holds one, and the fp32
    logits for the loss, 4·s·b·V/t: the larger of the two stages is the GPU's figure. Interleaved
    over v chunks per GPU the first stage holds (1 + (p-1)/(p·v)) times as much (Korthikanti et al.,
    section 4.2.3). Flash
    attention never stores the a·s² attention scores (the paper's selective recomputation), which
    drops the 5·a·s/h term.
    """
    s, b, h, a, t, p = sequence, micro_batch, hidden, heads, tensor_parallel, pipeline
    scores = 0.0 if flash_attention else 5 * a * s / h
    full_layer = s * b * h / t * (34 + scores)
    bracket = "34" if flash_attention else "34 + 5·a·s/h"
    numbers = "34" if flash_attention else f"34 + 5·{a}·{s}/{h}"
    stage_layers = layers / p

    def held(in_flight: float) -> tuple[float, str, str]:
        layer_count = in_flight * stage_layers
        if checkpointing:
            value = (layer_count * 2 * s * b * h / t + full_layer) / GB
            return (value, f"{'k·L/p' if p > 1 else 'L'} × 2·s·b·h/t + s·b·h/t·({bracket})   (checkpointed inputs "
                    "+ one layer recomputed)",
                    f"{layer_count:g} × 2·{s}·{b}·{h}/{t} + {full_layer / GB:.3f} GB = {value:.2f} GB")
        value = layer_count * full_layer / GB
        return (value, f"{'k·L/p' if p > 1 else 'L'} × s·b·h/t × ({bracket})",
                f"{layer_count:g} × {s}·{b}·{h}/{t} × ({numbers}) = {value:.2f} GB")

    logits = 4 * s * b * vocab / t / GB
    interleaving = 1 + (p - 1) / (p * virtual_stages) if virtual_stages > 1 else 1.0
    first = held(min(p, micro_batches) * interleaving if p > 1 else 1)
    if p == 1:
        value, formula, worked = first
        on_this_stage = logits
    else:
        last = held(1)
        if first[0] >= last[0] + logits:
            (value, formula, worked), on_this_stage = first, 0.0
            formula += (f"; first stage, k = min(p, m) = {min(p, micro_batches)} micro-batches in flight" + (
                f" × (1 + (p-1)/(p·v)) = {min(p, micro_batches) * interleaving:.4g} (interleaved)"
                if virtual_stages > 1 else ""))
        else:
            (value, formula, worked), on_this_stage = last, logits
            formula += "; last stage (one micro-batch in flight, and the logits)"
    return [Quantity("activations", value, "GB", formula, worked),
            Quantity("logits (fp32, for the loss)", on_this_stage, "GB", "4·s·b·V/t" + ("" if on_this_stage or p == 1
                     else " on the last stage, not this one"),
                     f"4·{s}·{b}·{vocab}/{t} = {logits:.2f} GB" + ("" if on_this_stage or p == 1 else " (elsewhere)"))]


def transfer_time(nbytes: float, gbytes_per_s: float) -> Quantity:
    """Moving bytes over a link: bytes / bandwidth."""
    seconds = nbytes / (gbytes_per_s * GB)
    return Quantity("transfer time", seconds * 1e3, "ms", "bytes / bandwidth",
                    f"{nbytes / 1e6:.4g} MB / {gbytes_per_s:g} GB/s = {seconds * 1e3:.4g} ms")


def ring_factor(ranks: int, volume: float = 2.0) -> float:
    """Per-rank traffic of a ring collective relative to the buffer: volume·(n-1)/n (2 for all-reduce)."""
    return volume * (ranks - 1) / ranks if ranks > 1 else 0.0


def ring_all_reduce_time(nbytes: float, ranks: int, gbytes_per_s: float, volume: float = 2.0,
                         name: str = "ring all-reduce") -> Quantity:
    """A ring all-reduce (volume 2) or ZeRO-3's gather+gather+scatter (volume 3) over n ranks."""
    factor = ring_factor(ranks, volume)
    seconds = factor * nbytes / (gbytes_per_s * GB)
    v = f"{volume:g}"
    return Quantity(name, seconds * 1e3, "ms", f"{v}(n-1)/n × bytes / bandwidth",
                    f"{v}·({ranks}-1)/{ranks} × {nbytes / 1e6:.4g} MB / {gbytes_per_s:g} GB/s = {seconds * 1e3:.4g} ms")


def compute_time(active_parameters: float, tokens: float, gpus: int, peak_tflops: float, mfu: float,
                 checkpointing: bool) -> Quantity:
    """6·P·tokens FLOPs spread over the GPUs at the assumed MFU; full checkpointing redoes the forward (8/6)."""
    recompute = 8 / 6 if checkpointing else 1.0
    seconds = 6 * active_parameters * tokens * recompute / (gpus * peak_tflops * 1e12 * mfu)
    extra = " × 8/6 (recompute)" if checkpointing else ""
    return Quantity("compute", seconds * 1e3, "ms", "6 × P × tokens / (GPUs × peak × MFU)" + extra,
                    f"6 × {active_parameters:.4g} × {tokens:.4g} / ({gpus} × {peak_tflops:g}e12 × {mfu:g})"
                    f"{extra} = {seconds * 1e3:.4g} ms")


def pipeline_bubble(stages: int, micro_batches: int, virtual_stages: int = 1) -> Quantity:
    """The 1F1B schedule's idle fraction: (p-1)/(m+p-1); interleaved over v chunks per GPU, (p-1)/(v·m+p-1)."""
    v = virtual_stages
    value = (stages - 1) / (v * micro_batches + stages - 1)
    if v == 1:
        return Quantity("pipeline bubble", value, "fraction", "(p-1)/(m+p-1)",
                        f"({stages}-1)/({micro_batches}+{stages}-1) = {value:.3f}")
    return Quantity("pipeline bubble", value, "fraction", "(p-1)/(v·m+p-1), interleaved",
                    f"({stages}-1)/({v}·{micro_batches}+{stages}-1) = {value:.3f}")
