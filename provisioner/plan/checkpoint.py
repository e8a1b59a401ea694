"""The checkpoint a training writes: its size from the model, its shard per rank, and what saving
and loading it costs.

A checkpoint holds what a training needs to go on exactly: the weights, the optimizer's fp32
master copy and its states (mixed precision with Adam: 2 + 4 + 8 = 14 bytes per parameter),
never the gradients (Rajbhandari et al. 2020, section 3.1: K = 12 bytes of optimizer state per
parameter beside the 2-byte weights). The ZeRO stage changes which rank holds what, not the
total: a sharded writer (torch.distributed.checkpoint, DeepSpeed) stores every tensor once, and
its planner spreads the replicated tensors over the ranks (DCP's dedup gives each duplicate to
the rank with the least to write), so each rank writes about the checkpoint over the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioner.plan.formulas import OPTIMIZER_STATE_BYTES, PRECISIONS, Quantity
from provisioner.plan.models import model_parameters

GIB = 2**30


@dataclass(frozen=True)
class Checkpoint:
    """The target model's checkpoint: its parts, total and the shard one rank writes."""

    model: str
    parameters: float
    parts: list[Quantity]
    total_bytes: float
    ranks: int

    @property
    def shard_bytes(self) -> float:
        return self.total_bytes / max(1, self.ranks)

    def per_node_bytes(self, nodes: int) -> float:
        return self.total_bytes / max(1, nodes)

    def as_dict(self) -> dict:
        return {"model": self.model, "parameters": self.parameters, "total_bytes": self.total_bytes,
                "total_gib": round(self.total_bytes / GIB, 3), "ranks": self.ranks,
                "shard_bytes": self.shard_bytes, "parts": [part.as_dict() for part in self.parts]}


def checkpoint(model: str, ranks: int, precision: str = "bf16", optimizer: str = "adamw") -> Checkpoint:
    """The checkpoint of `model` (a preset such as 70B, or a parameter count such as 20M) trained
    in `precision` with `optimizer`, written by `ranks` ranks. ValueError for an unknown model."""
    name, parameters = model_parameters(model)
    return checkpoint_of(name, parameters, ranks, precision, optimizer)


def checkpoint_of(name: str, parameters: float, ranks: int, precision: str = "bf16",
                  optimizer: str = "adamw") -> Checkpoint:
    """The checkpoint of a model of `parameters` parameters."""
    spec = PRECISIONS[precision]

    def part(label: str, per_parameter: int) -> Quantity:
        value = parameters * per_parameter
        return Quantity(label, value / GIB, "GiB", f"P × {per_parameter} B",
                        f"{parameters:.4g} × {per_parameter} B = {value / GIB:.4g} GiB")

    parts = [part(f"weights ({precision})", spec.weight_bytes)]
    if spec.master_bytes:
        parts.append(part("master weights (fp32)", spec.master_bytes))
    parts.append(part(f"optimizer states ({optimizer})", OPTIMIZER_STATE_BYTES[optimizer]))
    total = sum(p.value for p in parts) * GIB
    return Checkpoint(name, parameters, parts, total, ranks)


def transfer_seconds(nbytes_per_node: float, gbytes_per_s_per_node: float) -> float:
    """Every node writes (or reads) its part at once: the slowest node's bandwidth sets the time."""
    return nbytes_per_node / (gbytes_per_s_per_node * 1e9)


def overhead(save_s: float, interval_steps: int, step_time_s: float) -> Quantity:
    """The share of wall time a blocking save takes at one save every `interval_steps` steps."""
    training_s = interval_steps * step_time_s
    value = save_s / (training_s + save_s)
    return Quantity("checkpoint overhead", value, "fraction", "save / (interval × step time + save)",
                    f"{save_s:.4g} s / ({interval_steps} × {step_time_s:.4g} s + {save_s:.4g} s) = {value:.2%}")
