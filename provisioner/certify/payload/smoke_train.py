#!/usr/bin/env python3
"""Smoke training: a small GPT-style decoder trained with DDP on synthetic data.

Runs under torchrun on every rank: NCCL and the rank's GPU (LOCAL_RANK) where there are
GPUs, gloo on CPU. The data has learnable structure (arithmetic progressions modulo the
vocabulary with 10 % noise tokens), so a working cluster drives the loss well below its
initial ln(vocab). Every step each rank records its loss, step time, compute time (forward
and backward until its last gradient bucket is ready: DDP's all-reduce hook marks it, so the
time spent waiting for the others in the all-reduce is apart) and the global gradient norm;
the ranks exchange loss, norm and step time every step and all stop at the first step where a
loss is not finite or the ranks' gradient norms differ (after the all-reduce every rank must
hold the same gradients). At the end the ranks compare parameter checksums. A heartbeat thread
reports each rank's step and phase (compute, collective) to the driver. Rank 0 prints one line
`PROVISION-TRAIN <json>`: the run's series (mean loss, global gradient norm, step time), a
summary per rank (compute and wait medians, its CPUs). Runs on the nodes: torch only.

Resume: with --checkpoint-dir and --save-at K the run saves its state after K steps
(training_checkpoint.py) and goes on; with --resume a new run loads it and trains from step K to
--steps. Each rank leaves the checksums of the state it saved beside the checkpoint and, on
resuming, compares what it loaded with them: the resumed run reports the ranks whose state
differs, with the first tensor that does. The certification compares the resumed steps' losses
and gradient norms with the run that went on.
"""
from __future__ import annotations

import argparse
import math
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
import training_checkpoint
from rank_device import Heartbeat, cpus, device_for_rank, finish, init_group, print_marked, synchronize
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class Preset:
    vocab: int
    width: int
    layers: int
    heads: int
    sequence: int
    batch: int
    learning_rate: float
    bf16: bool
    # The tokens the synthetic data uses (the first data_vocab of the vocabulary): the model's
    # full vocabulary sets its size and cost, a smaller alphabet lets a short run learn. Over a
    # 32768-token vocabulary, 256 data tokens took a 4-layer CPU model 57 % down in 200 steps
    # (4096 data tokens: 19 %, the alphabet learnt but not yet the progressions).
    data_vocab: int
    # The share by which a healthy cluster's loss falls over the run (first 10 steps against the
    # last tenth), for runs of at least min_steps_for_drop steps; fewer steps ask proportionally less.
    loss_drop_min: float
    min_steps_for_drop: int


PRESETS = {
    # CPU-sized: a lab or a login node; seconds per hundred steps on gloo. One rank's 200 steps
    # took the loss down 40 %, two ranks' about 46 %; 1000 steps over 70 %.
    "tiny": Preset(vocab=256, width=64, layers=2, heads=4, sequence=64, batch=8, learning_rate=3e-3, bf16=False,
                   data_vocab=256, loss_drop_min=0.3, min_steps_for_drop=200),
    "small": Preset(vocab=8192, width=768, layers=12, heads=12, sequence=1024, batch=8, learning_rate=6e-4, bf16=True,
                    data_vocab=256, loss_drop_min=0.4, min_steps_for_drop=200),
    # About 1.0 B parameters: one H100/H200 per rank, bf16 autocast.
    "1b": Preset(vocab=32768, width=2048, layers=18, heads=16, sequence=2048, batch=4, learning_rate=3e-4, bf16=True,
                 data_vocab=256, loss_drop_min=0.4, min_steps_for_drop=200),
}
# Dense bf16 peak of one GPU (TFLOP/s, without sparsity), by the exact name CUDA reports (the
# "NVIDIA " prefix and any MIG suffix removed): the SXM, PCIe and NVL parts of one generation
# differ by up to a third, so a name is matched whole, never by a part of it.
PEAK_BF16_TFLOPS = {
    "H200": 989.0, "H200 NVL": 835.0,
    "H100 80GB HBM3": 989.0, "H100 SXM5 80GB": 989.0, "H100 PCIe": 756.0, "H100 NVL": 835.0,
    "H800": 989.0, "H800 PCIe": 756.0, "GH200 480GB": 989.0, "GH200 144G HBM3e": 989.0,
    "A100-SXM4-80GB": 312.0, "A100-SXM4-40GB": 312.0, "A100 80GB PCIe": 312.0, "A100-PCIE-40GB": 312.0,
    "L40S": 362.0, "L40": 181.0, "L4": 121.0,
    "B200": 2250.0,
}


class Block(nn.Module):
    def __init__(self, preset: Preset):
        super().__init__()
        self.heads = preset.heads
        self.norm1 = nn.LayerNorm(preset.width)
        self.qkv = nn.Linear(preset.width, 3 * preset.width)
        self.proj = nn.Linear(preset.width, preset.width)
        self.norm2 = nn.LayerNorm(preset.width)
        self.mlp = nn.Sequential(nn.Linear(preset.width, 4 * preset.width), nn.GELU(),
                                 nn.Linear(4 * preset.width, preset.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, sequence, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, sequence, width))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, preset: Preset):
        super().__init__()
        self.tokens = nn.Embedding(preset.vocab, preset.width)
        self.positions = nn.Embedding(preset.sequence, preset.width)
        self.blocks = nn.ModuleList(Block(preset) for _ in range(preset.layers))
        self.norm = nn.LayerNorm(preset.width)
        self.head = nn.Linear(preset.width, preset.vocab, bias=False)
        self.head.weight = self.tokens.weight
        self.apply(self._initialise)

    @staticmethod
    def _initialise(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def synthetic_batch(preset: Preset, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Sequences start + stride*t (mod data_vocab), 10 % of tokens replaced by noise."""
    shape = (preset.batch, 1)
    start = torch.randint(0, preset.data_vocab, shape, generator=generator)
    stride = torch.randint(1, 17, shape, generator=generator)
    steps = torch.arange(preset.sequence + 1).unsqueeze(0)
    tokens = (start + stride * steps) % preset.data_vocab
    noise = torch.rand(tokens.shape, generator=generator) < 0.1
    tokens = torch.where(noise, torch.randint(0, preset.data_vocab, tokens.shape, generator=generator), tokens)
    return tokens.to(device)


def parameter_checksum(model: nn.Module) -> float:
    """Sum of every parameter in float64: equal parameters give equal sums on every rank."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()).item())


def flops_per_token(model: nn.Module, preset: Preset) -> float:
    """Training FLOPs per token (forward and backward, 3 x the forward's):
    - 6 x the weights of the matrix products: every parameter but the position table, a lookup
      (the token table is also the output head, a product);
    - causal attention, 6 x layers x width x sequence: Q.K^T and the weighted sum of V take
      2 x 2 x width FLOPs per key, and a causal token attends to half the sequence on average
      (PaLM's 12 x layers x width x sequence counts every key)."""
    weights = sum(p.numel() for p in model.parameters()) - model.positions.weight.numel()
    return 6 * weights + 6 * preset.layers * preset.width * preset.sequence


def gpu_model_key(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100 80GB HBM3'; a MIG instance's suffix dropped."""
    name = name.strip()
    name = name.removeprefix("NVIDIA ").strip()
    return name.split(" MIG ")[0].strip()


def peak_flops(device: torch.device) -> float | None:
    """The GPU's dense bf16 peak in FLOP/s, None for the CPU or a GPU not in the table."""
    if device.type != "cuda":
        return None
    tflops = PEAK_BF16_TFLOPS.get(gpu_model_key(torch.cuda.get_device_name(device)))
    return tflops * 1e12 if tflops else None


def learning_rate(preset: Preset, step: int, steps: int) -> float:
    """Linear warm-up over the first tenth of the run (at most 100 steps), then constant."""
    warmup = max(1, min(100, steps // 10))
    return preset.learning_rate * min(1.0, (step + 1) / warmup)


def loss_drop_required(preset: Preset, steps: int) -> float:
    """The loss drop a healthy run of this many steps reaches."""
    return preset.loss_drop_min * min(1.0, steps / preset.min_steps_for_drop)


def first_violation(step: int, gathered: torch.Tensor, hosts: list[str], tolerance: float) -> dict | None:
    """The online checks: every rank's loss finite, every rank's gradient norm the same."""
    losses, norms = gathered[:, 0].tolist(), gathered[:, 1].tolist()
    bad = [rank for rank, loss in enumerate(losses) if not math.isfinite(loss)]
    if bad:
        return {"check": "loss_finite", "step": step, "ranks": bad, "hosts": [hosts[r] for r in bad]}
    # A non-finite norm: an overflow (or a NaN) in some rank's gradients, which the all-reduce
    # then spreads to every rank; its own failure, not a disagreement between the ranks.
    bad = [rank for rank, norm in enumerate(norms) if not math.isfinite(norm)]
    if bad:
        return {"check": "grad_norm_finite", "step": step, "ranks": bad, "hosts": [hosts[r] for r in bad],
                "norms": [norm if math.isfinite(norm) else str(norm) for norm in norms]}
    def agree(a: float, b: float) -> bool:
        return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-30)

    # The value most ranks hold is the reference; without a majority every rank is a suspect.
    support = [sum(agree(norm, other) for other in norms) for norm in norms]
    reference = norms[support.index(max(support))]
    bad = [rank for rank, norm in enumerate(norms) if not agree(norm, reference)]
    if bad and max(support) * 2 <= len(norms):
        bad = list(range(len(norms)))
    if bad:
        return {"check": "grad_norm_consistency", "step": step, "ranks": bad, "hosts": [hosts[r] for r in bad],
                "norms": norms}
    return None


class StepClock:
    """One rank's step timing: the step's start, and the moment its last gradient bucket is
    ready (DDP's all-reduce hook on the last bucket), which ends its own compute: what follows
    until the step's end is the wait in the all-reduce. On a GPU the moments are CUDA events on
    the compute stream, read after the step's synchronize."""

    def __init__(self, device: torch.device, heartbeat: Heartbeat):
        self.device = device
        self.heartbeat = heartbeat
        self.step = 0
        self._start: float | torch.cuda.Event = 0.0
        self._computed: float | torch.cuda.Event | None = None

    def now(self) -> float | torch.cuda.Event:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def begin(self, step: int) -> None:
        self.step = step
        self._computed = None
        self.heartbeat.advance(f"step {step} compute")
        self._start = self.now()

    def hook(self, state, bucket):  # unannotated: DDP rejects the string annotations of this module
        if bucket.is_last():
            self._computed = self.now()
            self.heartbeat.advance(f"step {self.step} collective")
        return default_hooks.allreduce_hook(None, bucket)

    def compute_seconds(self, end: float | torch.cuda.Event) -> float:
        """From the step's start to its last bucket (to `end` where no bucket was marked)."""
        last = self._computed if self._computed is not None else end
        if isinstance(self._start, torch.cuda.Event):
            return self._start.elapsed_time(last) / 1000
        return float(last) - float(self._start)


def quantile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--grad-norm-tolerance", type=float, default=0.0,
                        help="relative difference allowed between the ranks' gradient norms (0: identical)")
    parser.add_argument("--inject-grad-fault", type=int, default=None, metavar="RANK",
                        help="testing only: perturb this rank's gradients after the all-reduce")
    parser.add_argument("--inject-at-step", type=int, default=20)
    parser.add_argument("--inject-grad-value", choices=["noise", "inf"], default="noise",
                        help="testing only: the fault: noise in the gradients or an infinite gradient")
    parser.add_argument("--bucket-mb", type=float, default=100.0,
                        help="DistributedDataParallel's gradient bucket size (MiB): the all-reduce message size")
    parser.add_argument("--warmup-steps", type=int, default=50,
                        help="steps left out of the per-rank compute and wait medians")
    parser.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                        help="auto: NCCL on GPUs, gloo on the CPU; gloo on GPUs lets ranks share one (testing)")
    parser.add_argument("--require-cuda", action="store_true",
                        help="the node has GPUs: refuse to run on the CPU (a rank without a GPU fails)")
    parser.add_argument("--checkpoint-dir", type=Path, help="where the resume check's checkpoint is saved and loaded")
    parser.add_argument("--save-at", type=int, help="save the checkpoint after this many steps, and go on")
    parser.add_argument("--resume", action="store_true", help="load the checkpoint and train from its step")
    parser.add_argument("--inject-resume-fault", type=int, default=None, metavar="RANK",
                        help="testing only: this rank perturbs a tensor of the state it loaded")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if (args.save_at is not None or args.resume) and args.checkpoint_dir is None:
        parser.error("--save-at and --resume need --checkpoint-dir")
    if args.save_at is not None and not 0 < args.save_at < args.steps:
        parser.error("--save-at must be between 0 and --steps")
    preset = PRESETS[args.preset]
    heartbeat = Heartbeat()
    device = device_for_rank(args.require_cuda)
    heartbeat.advance("joining the process group")
    init_group(device, args.backend)
    heartbeat.advance("process group ready")
    rank, world = dist.get_rank(), dist.get_world_size()
    hosts: list[str] = [""] * world
    dist.all_gather_object(hosts, socket.gethostname())

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    with device:  # built where it trains: no host copy of a billion parameters per rank
        model = Decoder(preset)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                  gradient_as_bucket_view=True, bucket_cap_mb=args.bucket_mb)
    clock = StepClock(device, heartbeat)
    ddp.register_comm_hook(None, clock.hook)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=learning_rate(preset, 0, args.steps), weight_decay=0.0,
                                  fused=device.type == "cuda")
    generator = torch.Generator().manual_seed(args.seed + 1000 * (rank + 1))
    use_bf16 = preset.bf16 and device.type == "cuda"

    first_step, saved, resume_state = 0, False, None
    if args.resume:
        heartbeat.advance("loading the checkpoint")
        # DDP lays its gradient buckets out again after its first iteration, in the order the
        # gradients became ready: one iteration thrown away first, so that the resumed steps
        # reduce in the layout the run that went on had (the same sums in the same order).
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            throwaway = synthetic_batch(preset, torch.Generator().manual_seed(0), device)
            throwaway_loss = F.cross_entropy(ddp(throwaway[:, :-1]).float().reshape(-1, preset.vocab),
                                             throwaway[:, 1:].reshape(-1))
        throwaway_loss.backward()
        optimizer.zero_grad(set_to_none=True)
        first_step = training_checkpoint.load(args.checkpoint_dir, model, optimizer, generator)
        if args.inject_resume_fault == rank:
            with torch.no_grad():
                tensor = model.blocks[-1].mlp[0].weight
                tensor.add_(torch.randn_like(tensor) * 1e-3)
        difference = training_checkpoint.first_difference(args.checkpoint_dir, model, optimizer)
        differences: list = [None] * world
        dist.all_gather_object(differences, difference)
        resume_state = {"ranks_compared": world,
                        "differing": [{"rank": r, "host": hosts[r], "tensor": name}
                                      for r, name in enumerate(differences) if name is not None]}

    own: dict[str, list[float]] = {"step_time_s": [], "compute_time_s": []}
    series: dict[str, list[float]] = {"mean_loss": [], "grad_norm": [], "step_time_s": []}
    violation = None
    started = time.perf_counter()
    step_starts: list[float] = []
    for step in range(first_step, args.steps):
        tokens = synthetic_batch(preset, generator, device)
        synchronize(device)
        step_start = time.perf_counter()
        step_starts.append(step_start)
        clock.begin(step)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            logits = ddp(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, preset.vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.inject_grad_fault == rank and step >= args.inject_at_step:
            with torch.no_grad():
                if args.inject_grad_value == "inf":
                    next(model.parameters()).grad.view(-1)[0] = math.inf
                else:
                    for parameter in model.parameters():
                        parameter.grad.add_(torch.randn_like(parameter.grad) * 1e-3)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(preset, step, args.steps)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        end = clock.now()
        synchronize(device)
        step_time = time.perf_counter() - step_start
        own["step_time_s"].append(step_time)
        own["compute_time_s"].append(clock.compute_seconds(end))
        local = torch.tensor([loss.item(), grad_norm.item(), step_time], dtype=torch.float64, device=device)
        gathered = [torch.zeros_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        stacked = torch.stack(gathered).cpu()
        series["mean_loss"].append(float(stacked[:, 0].mean()))
        series["grad_norm"].append(float(stacked[0, 1]))
        series["step_time_s"].append(float(stacked[:, 2].max()))
        violation = first_violation(step, stacked[:, :2], hosts, args.grad_norm_tolerance)
        if violation:
            break
        if args.save_at is not None and step + 1 == args.save_at:
            heartbeat.advance(f"step {step} saving the checkpoint")
            training_checkpoint.save(args.checkpoint_dir, model, optimizer, args.save_at, generator)
            saved = True
    finished = time.perf_counter()
    elapsed = finished - started
    heartbeat.advance("finishing")
    checksum = torch.tensor([parameter_checksum(model)], dtype=torch.float64, device=device)
    checksums = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(checksums, checksum)
    steps_done = len(own["step_time_s"])
    warm = min(args.warmup_steps, steps_done // 5)
    compute, steps = own["compute_time_s"][warm:], own["step_time_s"][warm:]
    waits = [total - busy for total, busy in zip(steps, compute, strict=True)]
    summary = {
        "rank": rank, "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "host": hosts[rank],
        "device": str(device), **cpus(),
        "compute_median_s": quantile(compute, 0.5), "compute_p90_s": quantile(compute, 0.9),
        "wait_median_s": quantile(waits, 0.5), "step_median_s": quantile(steps, 0.5),
        # The NCCL inside torch's wheel (not the node's libnccl2, which nccl-tests uses).
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
    }
    heartbeat.stop()
    everyone: list[dict | None] = [None] * world
    dist.all_gather_object(everyone, summary)
    # Throughput and MFU over the steps after the warm-up: the first steps carry start-up
    # (allocator growth, kernel selection, NCCL's connections), not the machine's rate.
    steady_steps = steps_done - warm
    steady_s = finished - step_starts[warm] if steady_steps > 0 else elapsed
    tokens_per_second = max(1, steady_steps) * preset.batch * preset.sequence * world / steady_s
    peak = peak_flops(device)
    flops = flops_per_token(model, preset)
    if rank == 0:
        result = {
            "world": world, "hosts": hosts, "backend": dist.get_backend(), "preset": args.preset,
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "config": asdict(preset), "steps_requested": args.steps, "steps_done": steps_done,
            "warmup_steps": warm, "parameters": sum(p.numel() for p in model.parameters()), "bf16": use_bf16,
            "loss_drop_min": loss_drop_required(preset, args.steps), "bucket_mb": args.bucket_mb,
            "peak_tflops": peak / 1e12 if peak else None, "fault_injected": args.inject_grad_fault is not None,
            "violation": violation, "series": series, "first_step": first_step,
            "parameter_checksums": [c.item() for c in checksums],
            "saved_at": args.save_at if saved else None, "resumed": args.resume, "resume_state": resume_state,
            "resume_fault_injected": args.inject_resume_fault is not None,
            "elapsed_s": elapsed, "steady_s": steady_s, "steady_steps": steady_steps,
            "tokens_per_second": tokens_per_second, "flops_per_token": flops,
            "mfu": tokens_per_second * flops / (world * peak) if peak else None,
            "ranks": everyone,
        }
        print_marked("PROVISION-TRAIN ", result)
    if args.resume and args.checkpoint_dir is not None:
        dist.barrier()
        if rank == 0:
            training_checkpoint.remove(args.checkpoint_dir)
    del ddp, optimizer
    finish()


if __name__ == "__main__":
    main()
