"""The smoke training's checkpoint: saved and loaded with torch.distributed.checkpoint, as
trainings do (each rank writes its own items, replicated tensors once), with what an exact
resume needs besides the model and the optimizer: the step, and each rank's data position (its
batch generator) and RNG state. Beside it each rank leaves the checksums of every tensor of the
state it saved; a rank that resumes compares what it loaded with its own file, so that only
the first differing tensor (or none) travels: a thousand nodes' ranks compare at once. Runs on
the nodes: torch only."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def _rank_key() -> str:
    return f"rank{dist.get_rank()}"


def _state(model: nn.Module, optimizer: torch.optim.Optimizer, step: int,
           generator: torch.Generator) -> dict:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    # Per-rank items under per-rank keys: the planner would keep one copy of equal keys.
    mine = {"step": torch.tensor([step], dtype=torch.int64), "generator": generator.get_state(),
            "rng": torch.get_rng_state()}
    return {"model": model_state, "optimizer": optimizer_state, _rank_key(): mine}


def save(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int,
         generator: torch.Generator) -> None:
    """Every rank's part of the checkpoint after `step` steps, into directory (shared by the nodes),
    and the checksums of the state this rank saved."""
    dcp.save(_state(model, optimizer, step, generator), checkpoint_id=str(directory))
    _checksums_file(directory).write_text(json.dumps(checksums(model, optimizer)))


def _checksums_file(directory: Path) -> Path:
    return Path(directory) / f"state-checksums-{_rank_key()}.json"


def first_difference(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> str | None:
    """The first tensor (in the state's order) whose checksums differ from what this rank saved,
    one missing on either side, or None when the loaded state is the saved one."""
    try:
        saved = json.loads(_checksums_file(directory).read_text())
    except (OSError, ValueError):
        return f"(no saved checksums for {_rank_key()})"
    loaded = checksums(model, optimizer)
    for name in list(saved) + [name for name in loaded if name not in saved]:
        if saved.get(name) != loaded.get(name):
            return name
    return None


def load(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
         generator: torch.Generator) -> int:
    """The checkpoint in directory into the model, the optimizer, this rank's generator and RNG;
    returns the steps it was saved after. Any rank may load any rank's save: DCP reads by name."""
    state = _state(model, optimizer, 0, generator)
    dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    mine = state[_rank_key()]
    generator.set_state(mine["generator"])
    torch.set_rng_state(mine["rng"])
    return int(mine["step"].item())


def checksums(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, list[float]]:
    """Every tensor of the model's and the optimizer's state, in order: [sum, sum of squares] in float64."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    found: dict[str, list[float]] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, torch.Tensor):
            data = value.detach().double()
            found[prefix] = [float(data.sum().item()), float((data * data).sum().item())]
        elif isinstance(value, dict):
            for key in value:
                walk(f"{prefix}.{key}" if prefix else str(key), value[key])
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                walk(f"{prefix}.{index}", item)

    walk("model", model_state)
    walk("optimizer", optimizer_state.get("state", {}))
    return found


def remove(directory: Path) -> None:
    """The checkpoint is the certification's, not the site's: gone once the resume is judged."""
    shutil.rmtree(directory, ignore_errors=True)
