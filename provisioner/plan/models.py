"""Transformer shapes: presets from published configurations, and their parameter counts."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    gated_mlp: bool = True
    tied_embeddings: bool = False
    experts: int = 1
    experts_per_token: int = 1
    source: str = ""

    def _attention(self) -> int:
        head_dim = self.hidden // self.heads
        return 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head_dim

    def _mlp(self) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * self.ffn

    def _embeddings(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def _router(self) -> int:
        return self.hidden * self.experts if self.experts > 1 else 0

    @property
    def parameters(self) -> int:
        """Every weight (all experts): what memory and gradient traffic scale with."""
        per_layer = self._attention() + self.experts * self._mlp() + self._router() + 2 * self.hidden
        return self.layers * per_layer + self._embeddings() + self.hidden

    @property
    def expert_parameters(self) -> int:
        """The experts' weights (0 for a dense model): what expert parallelism shards."""
        return self.layers * self.experts * self._mlp() if self.experts > 1 else 0

    @property
    def active_parameters_per_layer(self) -> int:
        """The weights of one layer a token passes through (top-k experts)."""
        return self._attention() + self.experts_per_token * self._mlp() + self._router() + 2 * self.hidden

    @property
    def active_parameters(self) -> int:
        """Weights one token passes through (top-k experts): what compute scales with."""
        per_layer = self._attention() + self.experts_per_token * self._mlp() + self._router() + 2 * self.hidden
        return self.layers * per_layer + self._embeddings() + self.hidden

    @property
    def formula(self) -> str:
        mlp = "3·h·ffn" if self.gated_mlp else "2·h·ffn"
        experts = f" × {self.experts} experts" if self.experts > 1 else ""
        return f"L × (2h² + 2h·kv·head_dim + {mlp}{experts}) + embeddings (V·h{'' if self.tied_embeddings else ' × 2'})"


PRESETS = {
    "1B": ModelShape("1B", 16, 2048, 32, 8, 8192, 128256, tied_embeddings=True, source="Llama 3.2 1B configuration"),
    "7B": ModelShape("7B", 32, 4096, 32, 32, 11008, 32000, source="Llama 2 7B configuration"),
    "13B": ModelShape("13B", 40, 5120, 40, 40, 13824, 32000, source="Llama 2 13B configuration"),
    "70B": ModelShape("70B", 80, 8192, 64, 8, 28672, 32000, source="Llama 2 70B configuration"),
    "180B": ModelShape("180B", 80, 14848, 232, 8, 59392, 65024, gated_mlp=False, source="Falcon 180B configuration"),
    "405B": ModelShape("405B", 126, 16384, 128, 8, 53248, 128256, source="Llama 3.1 405B configuration"),
    "8x7B-MoE": ModelShape("8x7B-MoE", 32, 4096, 32, 8, 14336, 32000, experts=8, experts_per_token=2,
                           source="Mixtral 8x7B configuration (8 experts, top-2)"),
}


def custom_shape(layers: int, hidden: int, heads: int, vocab: int, ffn: int | None,
                 kv_heads: int | None) -> ModelShape:
    """A dense decoder from its dimensions (SwiGLU MLP of 8h/3 unless ffn is given)."""
    return ModelShape("custom", layers, hidden, heads, kv_heads or heads, ffn or (8 * hidden) // 3, vocab,
                      source="given dimensions")


def parse_count(text: str) -> float:
    """7B, 6.7e9, 405b, 1.5T -> a number of parameters."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a parameter count (e.g. 7B, 6.7e9, 1.5T)")
    return float(match.group(1)) * _SCALE[match.group(2).lower()]


def model_parameters(text: str) -> tuple[str, float]:
    """A preset's name (70B: its exact count) or a parameter count (20M) -> (name, parameters)."""
    key = next((name for name in PRESETS if name.lower() == text.strip().lower()), None)
    if key is not None:
        return key, float(PRESETS[key].parameters)
    return text.strip(), parse_count(text)
