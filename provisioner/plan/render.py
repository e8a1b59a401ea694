"""The sizing document as readable tables, every figure beside its formula."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text


def figure(value: float, unit: str) -> str:
    """A figure as people read it: 83.45 s rather than 8.345e+04 ms, 1.2 M rather than 1.2e+06."""
    if unit == "ms" and abs(value) >= 1000:
        return figure(value / 1000, "s")
    if unit == "s" and abs(value) >= 3600:
        return f"{value / 3600:,.1f} h"
    if unit == "fraction":
        return f"{value:.1%}"
    if abs(value) >= 1e4:
        return f"{value:,.0f} {unit}".strip()
    return f"{value:.4g} {unit}".strip()


def count(value: float) -> str:
    """15T, 405B, 7.5M: a count with its scale."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:g}"


def _quantities(title: str, rows: list[dict]) -> Table:
    """Name, value (aligned on the right) and the formula with, under it, the numbers put in: three
    columns that stay readable in 80."""
    table = Table(title=title, title_justify="left")
    table.add_column("", max_width=22, overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("formula / with the numbers", overflow="fold")
    for row in rows:
        table.add_row(row["name"], figure(row["value"], row["unit"]), Text(row["formula"]) + Text(
            "\n= " + row["worked"], style="dim"))
    return table


def _summary(document: dict) -> Table:
    model, training, cluster = document["model"], document["training"], document["cluster"]
    table = Table(title="plan", title_justify="left", show_header=False)
    table.add_column()
    table.add_column(overflow="fold")
    moe = f" ({model['active_parameters']:.4g} active)" if model["experts"] > 1 else ""
    table.add_row("model", f"{model['name']}: {model['parameters']:.4g} parameters{moe}; {model['layers']} layers, "
                  f"hidden {model['hidden']}, {model['heads']} heads ({model['source']})")
    table.add_row("training", f"sequence {training['sequence']}, micro-batch {training['micro_batch']}, global batch "
                  f"{training['global_batch']}, {training['precision']}, {training['optimizer']}, ZeRO stage "
                  f"{training['zero_stage']}, recompute {training['recompute']}, "
                  f"flash attention {'on' if training['flash_attention'] else 'off'} "
                  f"({training['global_batch_tokens'] / 1e6:.3g}M tokens per step)")
    table.add_row("cluster", f"{cluster['nodes']} x {cluster['gpus_per_node']} {cluster['gpu']} "
                  f"({cluster['gpu_memory_gb']:g} GB, {cluster['bf16_dense_tflops']:g} TFLOP/s bf16 dense; "
                  f"{cluster['gpu_source']})")
    table.add_row("bandwidth", cluster["bandwidth"])
    assumptions = document["assumptions"]
    model_text = (f"flat MFU {assumptions['mfu']:g} (--mfu)" if assumptions["mfu"] is not None else
                  "compute model: GEMMs at {gemm_share:g} of peak, {elementwise_bytes:g} B per activation element "
                  "at memory bandwidth, {layer_overhead_ms:g} ms per layer and micro-batch; fitted to {fitted_to}"
                  .format(**assumptions["compute_model"]))
    table.add_row("assumptions", f"{model_text}; overlap {assumptions['overlap']:g}, "
                  f"{cluster['memory_reserve']:.0%} of GPU memory reserved")
    return table


def _print_checkpoint(console: Console, checkpoint: dict, nodes: int) -> None:
    parts = ", ".join(f"{part['name']} {part['value']:.4g} GiB" for part in checkpoint["parts"])
    console.print(f"checkpoint: {checkpoint['total_gib']:.4g} GiB ({parts}); "
                  f"{checkpoint['shard_bytes'] / 2**30:.3g} GiB per rank, "
                  f"{checkpoint['per_node_bytes'] / 2**30:.3g} GiB per node of {nodes}", highlight=False)
    save = checkpoint.get("save")
    if save:
        console.print(f"checkpoint save {save['save_s']:.3g} s, load {save['load_s']:.3g} s (slowest node "
                      f"{save['write_gbps_per_node']:.3g} GB/s write, {save['read_gbps_per_node']:.3g} GB/s read; "
                      f"{save['source']})", highlight=False)
        if "overhead" in save:
            console.print(f"checkpoint every {save['every_steps']} steps: {save['overhead']['value']:.1%} of wall "
                          f"time saving ({save['overhead']['worked']})", highlight=False)


def print_plan(console: Console, document: dict) -> None:
    console.print(_summary(document))
    chosen = document.get("recommended") or document.get("closest")
    layout = chosen["layout"]
    header = "recommended layout" if document["fits"] else "closest layout (does not fit)"
    console.print(f"[bold]{header}[/]: {layout['description']}, {layout['micro_batches']} micro-batch(es) per step",
                  highlight=False)
    console.print(_quantities(f"memory per GPU: {chosen['memory_total_gb']:.1f} GB of "
                              f"{document['cluster']['usable_memory_gb']:.1f} GB usable", chosen["memory"]))
    console.print(_quantities("one micro-batch on the busiest pipeline stage", chosen["micro_batch"]))
    console.print(_quantities(f"one step: {figure(chosen['step_time_ms'], 'ms')}, gradients "
                              f"{chosen['gradient_bytes_per_step'] / 1e9:.3g} GB per GPU",
                              [chosen["gradients"], *chosen["communication"], chosen["compute"],
                               chosen["pipeline_bubble"], chosen["optimizer_step"]]))
    _print_checkpoint(console, document["checkpoint"], document["cluster"]["nodes"])
    if document["fits"]:
        other = document["activations_other_mode"]
        console.print(f"{'with' if other['checkpointing'] else 'without'} full activation checkpointing: activations "
                      f"{other['value']:.3g} GB ({other['formula']}), {other['memory_total_gb']:.1f} GB per GPU in all",
                      highlight=False)
        speed = document["throughput"]
        budget = (f"; {count(speed['tokens'])} tokens in {speed['days']:,.1f} days, {speed['gpu_hours']:,.0f} GPU-hours"
                  if "days" in speed else "")
        console.print(f"throughput: {speed['tokens_per_s']:,.0f} tokens/s, {speed['model_tflops_per_gpu']:.0f} TFLOP/s "
                      f"per GPU (model FLOPs){budget}", highlight=False)
        console.print(f"exposed communication {figure(chosen['exposed_communication_ms'], 'ms')} per step; scaling "
                      f"efficiency {chosen['scaling_efficiency']:.1%}; predicted MFU {chosen['predicted_mfu']:.1%}",
                      highlight=False)
        console.print(f"scaling limit: {document['scaling_limit']['reason']}", highlight=False)
        rules = Table(title="heuristics (rules of thumb, not the estimate)", title_justify="left")
        for column in ("rule", "value", "worked", "caveat"):
            rules.add_column(column, overflow="fold")
        for rule in document["heuristics"]:
            rules.add_row(f"{rule['name']}: {rule['rule']}", str(rule["value"]), rule["worked"], rule["label"])
        console.print(rules)
    for note in chosen["notes"]:
        console.print(f"note: {note}", highlight=False)
    colour = "green" if document["fits"] else "red"
    console.print(f"[{colour}]{document['verdict']}[/]", highlight=False)
