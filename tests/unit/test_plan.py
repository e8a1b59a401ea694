"""`provision plan`: the formulas on hand-computed cases, the layout choice, bad input, the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.errors import InputError
from provisioner.inventory.loader import load_inventory
from provisioner.plan import formulas, sizing
from provisioner.plan.models import PRESETS, parse_count
from provisioner.plan.run import DoesNotFit, PlanRequest, build, default_global_batch, plan

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"


def test_gradient_transfer_times_match_the_hand_computed_cases():
    assert formulas.transfer_time(280e6, 50).value == pytest.approx(5.6)
    assert formulas.transfer_time(280e6, 12.5).value == pytest.approx(22.4)
    # ring all-reduce, 8 ranks: 2·7/8 × 1 GB / 100 GB/s = 17.5 ms; ZeRO-3's volume 3: 26.25 ms
    assert formulas.ring_all_reduce_time(1e9, 8, 100).value == pytest.approx(17.5)
    assert formulas.ring_all_reduce_time(1e9, 8, 100, volume=3).value == pytest.approx(26.25)
    assert formulas.ring_all_reduce_time(1e9, 1, 100).value == 0


def test_presets_have_their_published_parameter_counts():
    assert PRESETS["7B"].parameters == pytest.approx(6.74e9, rel=1e-3)
    assert PRESETS["13B"].parameters == pytest.approx(13.02e9, rel=1e-3)
    assert PRESETS["70B"].parameters == pytest.approx(68.98e9, rel=1e-3)
    assert PRESETS["405B"].parameters == pytest.approx(405.8e9, rel=1e-3)
    moe = PRESETS["8x7B-MoE"]
    assert moe.parameters == pytest.approx(46.7e9, rel=1e-3)
    assert moe.active_parameters == pytest.approx(12.9e9, rel=2e-3)
    assert parse_count("7B") == 7e9 and parse_count("6.7e9") == 6.7e9 and parse_count("1.5t") == 1.5e12


@pytest.mark.parametrize(("stage", "expected_gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.88)])
def test_model_states_match_the_zero_paper(stage, expected_gb):
    """ZeRO (Rajbhandari et al. 2020), figure 1: 7.5B parameters, Adam, mixed precision, 64 GPUs."""
    parts = formulas.model_state_memory(7.5e9, 1, 64, stage, "bf16", "adamw")
    assert sum(q.value for q in parts) == pytest.approx(expected_gb, rel=0.01)


def test_activations_follow_the_per_layer_formula():
    # GPT-3 175B layer, s=2048, b=1, h=12288, a=96: s·b·h·(34 + 5·a·s/h) = 2048·12288·114 bytes
    layer = formulas.activation_memory(1, 12288, 96, 51200, 2048, 1, 1, checkpointing=False, flash_attention=False)
    assert layer[0].value == pytest.approx(2048 * 12288 * 114 / 1e9)
    assert layer[1].value == pytest.approx(4 * 2048 * 51200 / 1e9)
    flash = formulas.activation_memory(96, 12288, 96, 51200, 2048, 1, 8, checkpointing=False)
    assert flash[0].value == pytest.approx(96 * 2048 * 12288 / 8 * 34 / 1e9)
    checkpointed = formulas.activation_memory(96, 12288, 96, 51200, 2048, 1, 8, checkpointing=True)
    assert checkpointed[0].value == pytest.approx((96 * 2 * 2048 * 12288 / 8 + 2048 * 12288 / 8 * 34) / 1e9)
    assert checkpointed[0].value < flash[0].value / 10


def test_compute_time_and_bubble():
    # 6 × 7e9 × 1M tokens / (8 × 989e12 × 0.4) = 13.27 s; full recompute costs 8/6 of it
    assert formulas.compute_time(7e9, 1e6, 8, 989, 0.4, False).value == pytest.approx(13271.0, rel=1e-4)
    assert formulas.compute_time(7e9, 1e6, 8, 989, 0.4, True).value == pytest.approx(13271.0 * 8 / 6, rel=1e-4)
    assert formulas.pipeline_bubble(4, 12).value == pytest.approx(0.2)


def test_seventy_b_on_eight_h100_nodes_uses_tensor_parallel_inside_the_node_and_no_pipeline():
    document = plan(PlanRequest(model="70B", gpu="H100", nodes=8))
    layout = document["recommended"]["layout"]
    assert document["fits"] and layout["pipeline_parallel"] == 1 and layout["tensor_parallel"] == 8
    assert document["recommended"]["memory_total_gb"] <= document["cluster"]["usable_memory_gb"]
    every_formula = [q["formula"] for q in document["recommended"]["memory"] + document["recommended"]["communication"]]
    gradients = document["recommended"]["gradients"]
    assert gradients["value"] == pytest.approx(PRESETS["70B"].parameters / 8 * 2 / 1e6)
    assert all(every_formula) and document["recommended"]["compute"]["formula"].startswith("micro-batches ×")
    # the compute model's parts, each with its formula and its numbers
    parts = {q["name"]: q for q in document["recommended"]["micro_batch"]}
    assert set(parts) == {"matrix multiplications", "memory-bound operations",
                          "tensor-parallel collectives (exposed)"}
    assert "989 TFLOP/s × 0.7" in parts["matrix multiplications"]["worked"]
    # --mfu overrides the model with a flat utilisation
    flat = plan(PlanRequest(model="70B", gpu="H100", nodes=8, mfu=0.4))["recommended"]
    assert [q["name"] for q in flat["micro_batch"]] == ["compute at the given MFU"]
    assert flat["micro_batch"][0]["formula"].startswith("6 × P × tokens")


def test_pipeline_appears_only_when_memory_demands_it():
    tight = plan(PlanRequest(model="70B", gpu="H100", nodes=4, zero_stage=0))
    assert tight["recommended"]["layout"]["pipeline_parallel"] > 1
    assert not any(c["fits"] for c in tight["candidates"] if c["pipeline_parallel"] == 1)
    assert tight["recommended"]["pipeline_bubble"]["value"] > 0
    fewest = min(c["pipeline_parallel"] for c in tight["candidates"] if c["fits"])
    assert tight["recommended"]["layout"]["pipeline_parallel"] == fewest


def test_an_impossible_configuration_says_so():
    with pytest.raises(DoesNotFit) as raised:
        plan(PlanRequest(model="405B", gpu="A100-40GB", nodes=1, zero_stage=0))
    document = raised.value.document
    assert not document["fits"] and "does not fit in GPU memory at any layout" in document["verdict"]
    assert document["closest"]["memory_total_gb"] > document["cluster"]["usable_memory_gb"]


def test_a_slow_fabric_has_a_scaling_limit_where_communication_exceeds_compute():
    request = PlanRequest(model="7B", gpu="H100", nodes=2, fabric="eth-100", hcas_per_node=1, zero_stage=1)
    document = plan(request)
    limit = document["scaling_limit"]
    assert limit["gpus"] is not None and "exposed communication" in limit["reason"]
    job, cluster, global_batch = build(request)
    layout = sizing.Layout(**{"tensor": document["recommended"]["layout"]["tensor_parallel"],
                              "pipeline": 1, "data": 1, "micro_batches": 1})

    def at(gpus: int) -> sizing.Evaluation:
        d = gpus // layout.tensor
        trial = sizing.Cluster(cluster.gpu, 8, gpus // 8, cluster.bandwidth)
        return sizing.evaluate(job, trial, sizing.Layout(layout.tensor, 1, d, global_batch // d))

    assert at(limit["gpus"]).exposed_communication_ms > at(limit["gpus"]).compute.value
    assert at(limit["gpus"]).scaling_efficiency < 0.5
    below = max(g for g in range(8, limit["gpus"], 8) if global_batch % (g // layout.tensor) == 0)
    assert at(below).exposed_communication_ms <= at(below).compute.value
    assert at(below).scaling_efficiency >= 0.5
    fast = plan(PlanRequest(model="7B", gpu="H100", nodes=2, fabric="ib-ndr", zero_stage=1))
    assert fast["recommended"]["scaling_efficiency"] >= document["recommended"]["scaling_efficiency"]


def test_heuristics_are_labelled_and_computed_from_the_estimate():
    document = plan(PlanRequest(model="13B", gpu="H200", nodes=4))
    rules = {rule["name"]: rule for rule in document["heuristics"]}
    assert all("heuristic" in rule["label"] for rule in rules.values())
    optimal = rules["optimal GPU count (rule of thumb)"]
    chosen = document["recommended"]
    sync = sum(q["value"] for q in chosen["communication"] if "tensor-parallel" not in q["name"])
    assert optimal["value"] == pytest.approx(chosen["compute"]["value"] * 32 / sync * 0.85, rel=1e-3)
    assert "Ethernet vs InfiniBand (rule of thumb)" in rules


def test_the_default_batch_is_about_four_million_tokens_whatever_the_cluster():
    assert default_global_batch(4096, 1) == 1024 and default_global_batch(8192, 2) == 512
    small = plan(PlanRequest(model="7B", gpu="H100", nodes=2))
    large = plan(PlanRequest(model="7B", gpu="H100", nodes=1024))
    assert small["training"]["global_batch"] == large["training"]["global_batch"] == 1024
    assert small["training"]["global_batch_tokens"] == 4 * 2**20


def test_the_advice_names_only_what_the_user_has_not_tried():
    with pytest.raises(DoesNotFit) as raised:
        plan(PlanRequest(model="405B", gpu="A100-40GB", nodes=1, zero_stage=3, checkpointing=True))
    verdict = raised.value.document["verdict"]
    assert "--zero-stage" not in verdict and "--checkpointing" not in verdict and "more GPUs" in verdict
    with pytest.raises(DoesNotFit) as raised:
        plan(PlanRequest(model="405B", gpu="A100-40GB", nodes=1, micro_batch=4, tensor_parallel=8))
    verdict = raised.value.document["verdict"]
    assert "a higher --zero-stage (now 1)" in verdict and "--checkpointing" in verdict
    assert "a smaller --micro-batch (now 4)" in verdict and "letting plan choose --tensor-parallel" in verdict


def test_inventory_supplies_gpus_and_fabric():
    document = plan(PlanRequest(model="7B", inventory=load_inventory(str(EXAMPLE))))
    cluster = document["cluster"]
    assert (cluster["gpu"], cluster["nodes"], cluster["gpus_per_node"]) == ("H100", 2, 8)
    assert "8 x InfiniBand NDR = 400 GB/s per node" in cluster["bandwidth"]


def _certification(tmp_path: Path, all_nodes: float) -> Path:
    path = tmp_path / "certification.json"
    path.write_text(json.dumps({"nodes": ["gpu01", "gpu02"], "medians_gbps": {
        "nccl-tests.node": {"gpu01": 455.0, "gpu02": 440.0}, "nccl-tests.all": {"gpu01+gpu02": all_nodes}}}))
    return path


def test_a_certification_replaces_nominal_bandwidth_with_measured_busbw(tmp_path):
    measured = plan(PlanRequest(model="7B", gpu="H100", nodes=2, certification=_certification(tmp_path, 40.0)))
    assert "measured by provision certify" in measured["cluster"]["bandwidth"]
    sync = [q for q in measured["recommended"]["communication"] if "measured" in q["name"]]
    layout = measured["recommended"]["layout"]
    gradient_bytes = measured["recommended"]["gradient_bytes_per_step"]
    d = layout["data_parallel"]
    assert sync and sync[0]["value"] == pytest.approx(2 * (d - 1) / d * gradient_bytes / 40e9 * 1e3)


def test_bad_input_names_the_option_and_the_file(tmp_path, capsys):
    with pytest.raises(InputError) as raised:
        build(PlanRequest(model="3B", gpu="H100", nodes=2))
    assert raised.value.problems[0].key == "--model"
    with pytest.raises(InputError) as raised:
        build(PlanRequest(model="7B", gpu="H100", nodes=2, tensor_parallel=3))
    assert {p.key for p in raised.value.problems} == {"--tensor-parallel"}
    with pytest.raises(InputError) as raised:
        build(PlanRequest(parameters="7B", gpu="H100", nodes=2))
    assert "dimensions" in raised.value.problems[0].message
    broken = tmp_path / "certification.json"
    broken.write_text("{}")
    assert main(["plan", "--model", "7B", "--gpu", "H100", "--nodes", "2", "--certification", str(broken)]) == 2
    assert "certification.json: medians_gbps" in capsys.readouterr().err
    assert main(["plan", "--model", "7B", "--gpu", "Z9", "--nodes", "2"]) == 2
    assert "--gpu: unknown GPU 'Z9'" in capsys.readouterr().err


def test_the_command_prints_a_table_or_json_and_exits_one_when_nothing_fits(capsys):
    assert main(["plan", "--model", "7B", "--gpu", "H100", "--nodes", "2"]) == 0
    text = capsys.readouterr().out
    assert "recommended layout" in text and "2(n-1)/n" in text and "heuristic" in text
    assert main(["plan", "--model", "8x7B-MoE", "--gpu", "H200", "--nodes", "2", "--json",
                 "--tensor-parallel", "recommend", "--pipeline-parallel", "1"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["recommended"]["layout"]["pipeline_parallel"] == 1
    other = document["activations_other_mode"]
    assert other["checkpointing"] and other["memory_total_gb"] < document["recommended"]["memory_total_gb"]
    assert document["model"]["active_parameters"] < document["model"]["parameters"]
    assert main(["plan", "--model", "405B", "--gpu", "A100-40GB", "--nodes", "1", "--zero-stage", "0"]) == 1
    assert "does not fit in GPU memory at any layout" in capsys.readouterr().out


def test_the_scaling_limit_tries_every_feasible_gpu_count():
    """Pipeline 35 with tensor 8 fills whole nodes only at multiples of 35 nodes: the search used
    to try only powers of two beyond 64 nodes, found none, and blamed the batch at 280 GPUs."""
    document = plan(PlanRequest(model="405B", gpu="H100", gpus=2240, tensor_parallel=8, pipeline_parallel=35))
    limit = document["scaling_limit"]
    assert limit["gpus"] is not None and limit["gpus"] > 2240 and limit["gpus"] % 280 == 0
    assert "limits data parallelism to 280 GPUs" not in limit["reason"]
    # the first count at which the step falls under half compute, and none before it does
    assert limit["scaling_efficiency_there"] < 0.5


def test_a_tcp_fabric_gets_its_share_of_the_line_rate_and_rdma_the_whole():
    from provisioner.plan.hardware import FABRICS, TCP_SHARE_OF_LINE_RATE

    assert FABRICS["ib-ndr"].gbyte_per_port == 50 and FABRICS["roce-400"].gbyte_per_port == 50
    assert FABRICS["eth-400"].gbyte_per_port == 50 * TCP_SHARE_OF_LINE_RATE
    rdma = plan(PlanRequest(model="7B", gpu="H100", nodes=16, fabric="ib-ndr", tensor_parallel=1, pipeline_parallel=1))
    tcp = plan(PlanRequest(model="7B", gpu="H100", nodes=16, fabric="eth-400", tensor_parallel=1, pipeline_parallel=1))
    assert "TCP: 45% of the line rate" in tcp["cluster"]["bandwidth"]
    assert tcp["recommended"]["step_time_ms"] > rdma["recommended"]["step_time_ms"]


def test_throughput_in_the_units_architects_use(capsys):
    from provisioner.plan.render import count, figure

    document = plan(PlanRequest(model="70B", gpu="H100", nodes=64, tokens="2T"))
    speed, chosen = document["throughput"], document["recommended"]
    assert speed["tokens_per_s"] == pytest.approx(chosen["tokens_per_step"] / (chosen["step_time_ms"] / 1e3))
    assert speed["model_tflops_per_gpu"] == pytest.approx(chosen["predicted_mfu"] * 989, rel=1e-3)  # rounded MFU
    assert speed["days"] == pytest.approx(2e12 / speed["tokens_per_s"] / 86400)
    assert speed["gpu_hours"] == pytest.approx(speed["days"] * 24 * 512)
    assert figure(83450, "ms") == "83.45 s" and figure(0.25, "fraction") == "25.0%" and figure(12.5, "GB") == "12.5 GB"
    assert count(15e12) == "15T" and count(405e9) == "405B"
    assert main(["plan", "--model", "70B", "--gpu", "H100", "--nodes", "64", "--tokens", "2T"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "2T tokens in" in out
    step = next(line for line in out.splitlines() if line.startswith("one step:"))
    assert "e+0" not in step and " s," in step
    assert main(["plan", "--model", "70B", "--gpu", "H100", "--nodes", "64", "--tokens", "lots"]) == 2
    assert "--tokens" in capsys.readouterr().err


def test_gh200_and_h800_are_themselves_not_an_h200_or_an_h100():
    from provisioner.plan.hardware import INTRA_NODE_LINKS, gpu_for_model

    assert gpu_for_model("GH200-480GB").name == "GH200" and gpu_for_model("H200-SXM-141GB").name == "H200"
    h800 = gpu_for_model("H800-SXM5-80GB")
    assert h800.name == "H800" and INTRA_NODE_LINKS[h800.nvlink].gbps_per_gpu == 200
    assert plan(PlanRequest(model="7B", gpu="H800", nodes=2))["cluster"]["gpu"] == "H800"


def test_zero3_gathers_the_weights_for_every_micro_batch_on_the_critical_path():
    """ZeRO-3 gathers the weights before each micro-batch's forward and backward pass and scatters
    the gradients after it: with gradient accumulation its traffic is m times ZeRO-2's, and what
    the micro-batch's compute cannot hide is paid each time."""
    def run(zero: int, gpus: int) -> dict:
        return plan(PlanRequest(layers=96, hidden=12288, heads=96, vocab=51200, sequence=2048, gpu="A100-80GB",
                                gpus=gpus, zero_stage=zero, tensor_parallel=8, pipeline_parallel=1,
                                global_batch=1536, checkpointing=True, fabric="roce-200", hcas_per_node=4))
    sharded, plain = run(3, 384)["recommended"], run(2, 384)["recommended"]
    gathers = [q for q in sharded["communication"] if q["name"].startswith("ZeRO-3")]
    assert gathers and all("each micro-batch" in q["name"] for q in gathers)
    assert sharded["layout"]["micro_batches"] == 32
    assert sharded["exposed_communication_ms"] > 10 * plain["exposed_communication_ms"]
    assert sharded["predicted_mfu"] < plain["predicted_mfu"] / 2
    assert sharded["memory_total_gb"] < plain["memory_total_gb"] / 5


def _activations(document: dict) -> float:
    return next(q["value"] for q in document["recommended"]["memory"] if q["name"] == "activations")


def test_context_parallelism_splits_the_sequence_and_sends_keys_and_values_round_the_ring():
    def run(context: int, gpu: str = "H100", per_node: int = 8) -> dict:
        return plan(PlanRequest(model="70B", gpu=gpu, gpus=72, gpus_per_node=per_node, sequence=36864,
                                tensor_parallel=8, context_parallel=context, pipeline_parallel=1, global_batch=36,
                                checkpointing=True))
    whole, split = run(1), run(9)
    assert split["recommended"]["layout"]["context_parallel"] == 9
    assert _activations(split) < _activations(whole) / 8
    parts = {q["name"]: q for q in split["recommended"]["micro_batch"]}
    # TP 8 x CP 9 = 72 GPUs: the ring leaves the 8-GPU node for the NICs (one 400 Gb/s port per GPU)
    assert "/ 50 GB/s" in parts["context-parallel ring (exposed)"]["worked"]
    # the same group inside one GB200 NVL72 domain: the ring runs over NVLink, behind the attention core
    rack = run(9, "GB200", 4)
    ring = {q["name"]: q for q in rack["recommended"]["micro_batch"]}["context-parallel ring (exposed)"]
    assert "/ 900 GB/s" in ring["worked"] and ring["value"] == 0.0
    with pytest.raises(InputError, match="--context-parallel"):
        plan(PlanRequest(model="70B", gpu="H100", nodes=8, sequence=32768, context_parallel=3))


def test_fp8_runs_the_layers_gemms_at_the_fp8_peak_where_the_gpu_has_one():
    bf16 = plan(PlanRequest(model="70B", gpu="H100", nodes=8))["recommended"]
    fp8 = plan(PlanRequest(model="70B", gpu="H100", nodes=8, precision="fp8"))["recommended"]
    gemm = {name: next(q for q in chosen["micro_batch"] if q["name"] == "matrix multiplications")
            for name, chosen in (("bf16", bf16), ("fp8", fp8))}
    assert gemm["fp8"]["value"] < 0.6 * gemm["bf16"]["value"] and "fp8 1979 TFLOP/s" in gemm["fp8"]["worked"]
    assert fp8["step_time_ms"] < bf16["step_time_ms"] and fp8["memory_total_gb"] == bf16["memory_total_gb"]
    with pytest.raises(InputError, match="A100-80GB has no fp8"):
        plan(PlanRequest(model="70B", gpu="A100-80GB", nodes=8, precision="fp8"))


def test_tensor_parallelism_reaches_across_trays_inside_a_gb200_nvl72_domain():
    model = {"layers": 64, "hidden": 12288, "heads": 96, "vocab": 128000}
    rack = plan(PlanRequest(**model, gpu="GB200", gpus_per_node=4, nodes=18, tensor_parallel=24))
    assert rack["cluster"]["nvlink_domain"] == 72 and rack["recommended"]["layout"]["tensor_parallel"] == 24
    assert 24 in {c["tensor_parallel"] for c in plan(PlanRequest(**model, gpu="GB200", gpus_per_node=4,
                                                                  nodes=18))["candidates"]}
    with pytest.raises(InputError, match="8 GPUs of an NVLink domain"):
        plan(PlanRequest(**model, gpu="H100", nodes=18, tensor_parallel=24))
    with pytest.raises(InputError, match="--nvlink-domain"):
        plan(PlanRequest(**model, gpu="GB200", gpus_per_node=4, nodes=17))


def test_expert_parallelism_spreads_the_experts_and_pays_an_all_to_all_per_layer():
    def run(expert: int) -> dict:
        try:
            return plan(PlanRequest(model="8x7B-MoE", gpu="H100", nodes=4, tensor_parallel=1, pipeline_parallel=1,
                                    expert_parallel=expert))["recommended"]
        except DoesNotFit as verdict:
            return verdict.document["closest"]
    replicated, spread = run(1), run(8)
    assert not replicated["fits"] and spread["fits"]
    assert spread["layout"]["expert_parallel"] == 8
    weights = {name: next(q for q in r["memory"] if q["name"] == "weights")
               for name, r in (("replicated", replicated), ("spread", spread))}
    # every expert on each GPU, against 1/8 of them: the attention and embeddings stay whole
    shape = PRESETS["8x7B-MoE"]
    dense = shape.parameters - shape.expert_parameters
    assert weights["spread"]["value"] == pytest.approx((dense + shape.expert_parameters / 8) * 2 / 1e9)
    assert weights["replicated"]["value"] > 3 * weights["spread"]["value"]
    a2a = {q["name"]: q for q in spread["micro_batch"]}["expert all-to-all (exposed)"]
    assert "× 2 × 4096 × 2 B × (8-1)/8 / 450 GB/s" in a2a["worked"]  # top-2 of 8, inside the node
    assert "expert all-to-all (exposed)" not in {q["name"] for q in replicated["micro_batch"]}
    assert any("--expert-parallel" in note for note in replicated["notes"]) and not spread["notes"]
    # 16 experts' ranks span two nodes: the all-to-all leaves NVLink for the NICs
    wide = plan(PlanRequest(model="8x7B-MoE", gpu="H100", nodes=4, tensor_parallel=2, pipeline_parallel=1,
                            expert_parallel=8))["recommended"]
    assert "/ 50 GB/s" in {q["name"]: q for q in wide["micro_batch"]}["expert all-to-all (exposed)"]["worked"]
    with pytest.raises(InputError, match="--expert-parallel: 3 does not divide the model's 8 expert"):
        plan(PlanRequest(model="8x7B-MoE", gpu="H100", nodes=4, expert_parallel=3))
    with pytest.raises(InputError, match="1 expert"):
        plan(PlanRequest(model="70B", gpu="H100", nodes=4, expert_parallel=2))
