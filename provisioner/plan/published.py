"""A published training, predicted: the same model, training and layout through the plan's
model, side by side with what the paper printed (step time, MFU, memory)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.plan import compute, formulas, hardware, sizing
from provisioner.plan.models import PRESETS, ModelShape


@dataclass(frozen=True)
class Comparison:
    id: str
    source: str
    row: str
    published_step_s: float | None
    predicted_step_s: float | None
    published_mfu: float | None
    predicted_mfu: float | None
    published_memory_gb: float | None = None
    predicted_memory_gb: float | None = None
    fits: bool | None = None
    plan_mfu: float | None = None  # the MFU plan prints (PaLM's count of FLOPs)

    @staticmethod
    def error(published: float | None, predicted: float | None) -> float | None:
        """Relative error of the prediction, or None where nothing was published."""
        return None if published is None or predicted is None else (predicted - published) / published

    @property
    def step_error(self) -> float | None:
        return self.error(self.published_step_s, self.predicted_step_s)

    @property
    def mfu_error(self) -> float | None:
        return self.error(self.published_mfu, self.predicted_mfu)

    @property
    def memory_error(self) -> float | None:
        return self.error(self.published_memory_gb, self.predicted_memory_gb)


def _shape(row: dict[str, Any]) -> ModelShape:
    if "preset" in row:
        return PRESETS[row["preset"]]
    model, shape = row["model"], row["shape"]
    hidden = shape["hidden"]
    return ModelShape(row["id"], shape["layers"], hidden, shape["heads"], shape["heads"],
                      4 * hidden if not model["gated_mlp"] else (8 * hidden) // 3, model["vocab"],
                      gated_mlp=model["gated_mlp"], tied_embeddings=model["tied_embeddings"], source=row["source"])


def _megatron_recompute_flops(shape: ModelShape, batch: int, sequence: int) -> float:
    """Narayanan et al.'s equation (3): FLOPs per iteration, the recomputed forward pass counted."""
    s, h, layers, vocab = sequence, shape.hidden, shape.layers, shape.vocab
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))


def compare(row: dict[str, Any]) -> Comparison:
    """Predict one published training (the fixture's row) and set it beside the published figures."""
    shape = _shape(row)
    training, where, layout_row = row["training"], row["cluster"], row["layout"]
    gpu = hardware.GPUS[where["gpu"]]
    fabric = hardware.FABRICS[where["fabric"]]
    gpus, t, p = layout_row["gpus"], layout_row["tensor"], layout_row["pipeline"]
    c = layout_row.get("context", 1)
    d = gpus // (t * c * p)
    batch, b = row["global_batch"], training["micro_batch"]
    link = hardware.INTRA_NODE_LINKS[gpu.nvlink]
    bandwidth = sizing.nominal_bandwidth(link, fabric, where["hcas_per_node"])
    cluster = sizing.Cluster(gpu, where["gpus_per_node"], gpus // where["gpus_per_node"], bandwidth)
    parameters = float(shape.parameters)
    job = sizing.Job(shape, parameters, float(shape.active_parameters), training["sequence"], b, "bf16", "adam",
                     training["zero_stage"], training.get("checkpointing", False), None, 0.5,
                     training["flash_attention"], training.get("selective_recompute", False),
                     training["sequence_parallel"])
    layout = sizing.Layout(t, p, d, batch // (b * d), layout_row.get("virtual_stages", 1), c)
    result = sizing.evaluate(job, cluster, layout)
    published = row["published"]
    sequence = training["sequence"]
    tokens = batch * sequence
    step, mfu = published.get("step_time_s"), published.get("mfu")
    if published.get("counting") == "megatron-recompute":
        step = _megatron_recompute_flops(shape, batch, sequence) / (gpus * published["tflops_per_gpu"] * 1e12)
    elif published.get("counting") == "causal":
        # 6 × the weights a token multiplies, and the causal half of the attention core.
        per_token = compute.model_flops_per_token(shape, parameters, sequence) - 6 * shape.layers * sequence * \
            shape.hidden
        step = tokens * per_token / (gpus * published["tflops_per_gpu"] * 1e12)
    if mfu is None:
        mfu = tokens * compute.model_flops_per_token(shape, parameters, sequence) / (
            step * gpus * gpu.bf16_dense_tflops * 1e12)
    predicted_step = result.step_time_ms / 1e3
    # The MFU the paper would print for the predicted step, by its own count of FLOPs.
    return Comparison(row["id"], row["source"], row["row"], step, predicted_step, mfu, mfu * step / predicted_step,
                      fits=result.fits, predicted_memory_gb=result.memory_total_gb, plan_mfu=result.predicted_mfu)


def compare_model_states(zero: dict[str, Any], row: dict[str, Any]) -> Comparison:
    """ZeRO's Figure 1: model states per GPU at each stage."""
    states = formulas.model_state_memory(zero["parameters"], 1, zero["data_parallel"], row["zero_stage"], "bf16",
                                         "adam")
    return Comparison(row["id"], zero["source"], row["row"], None, None, None, None,
                      row["published"]["model_state_gb"], sum(q.value for q in states))
