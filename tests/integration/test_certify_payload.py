"""The node-side instruments run for real: torchrun with gloo on this machine (no lab needed)."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from provisioner.certify import criteria
from provisioner.certify.outputs import HEARTBEAT_MARK, Refused, read_output
from provisioner.certify.profiles import thresholds

PAYLOAD = Path(__file__).resolve().parents[2] / "provisioner" / "certify" / "payload"
sys.path.insert(0, str(PAYLOAD))
import smoke_train  # noqa: E402  (the payload's own modules, as the nodes run them)
import sweep  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(script: str, ranks: int, *args: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
               f"--master-port={free_port()}",
               str(PAYLOAD / script), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, check=False)


def torchrun(script: str, ranks: int, *args: str) -> str:
    done = launch(script, ranks, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def tiny_judge(**overrides) -> criteria.Criteria:
    settings = {"step_time_cv_max": 10.0, "warmup_steps": 10, **overrides}
    return criteria.Criteria(thresholds=thresholds("lab-cpu", "", 0, 400, None), gradient_bytes=1, **settings)


def test_sweep_reports_nccl_tests_compatible_rows():
    facts = read_output("sweep", torchrun("sweep.py", 2, "--min-bytes", "256K", "--max-bytes", "1M",
                                          "--gradient-bytes", "768K", "--iters", "3", "--repeats", "3"))
    assert facts["ranks"] == 2 and facts["backend"] == "gloo"
    assert [row["size_bytes"] for row in facts["rows"]] == [262144, 524288, 786432, 1048576]
    for row in facts["rows"]:
        assert row["wrong"] == 0 and len(row["repeats_busbw_gbps"]) == 3
        assert row["busbw_gbps"] == row["algbw_gbps"]  # 2(n-1)/n = 1 for two ranks
        assert abs(row["algbw_gbps"] - row["size_bytes"] / row["time_us"] / 1e3) < 0.01 * row["algbw_gbps"] + 1e-3


def test_smoke_training_learns_and_its_ranks_agree():
    output = torchrun("smoke_train.py", 2, "--preset", "tiny", "--steps", "150")
    result = {"name": "t", "instrument": "train", "scope": "training", "nodes": ["h"], "rc": 0, "stdout": output}
    checks, summary = criteria.training_checks(result, ["h"], tiny_judge())
    assert all(check.passed for check in checks), [c for c in checks if not c.passed]
    assert summary["steps_done"] == 150 and summary["ranks"] == 2
    # No inventory figure: the preset's own, scaled to the run's steps (150 of 200: 0.3 x 0.75).
    assert summary["loss_drop_min"] == pytest.approx(0.225)
    assert {c.id: c for c in checks}["training.loss_decrease"].name == "loss falls by at least 22%"


def test_the_ranks_report_their_compute_time_cpus_and_progress():
    output = torchrun("smoke_train.py", 2, "--preset", "tiny", "--steps", "60", "--warmup-steps", "10")
    facts = read_output("train", output)
    for rank in facts["ranks"]:
        # forward and backward to the last gradient bucket; what follows is waiting in the all-reduce
        assert 0 < rank["compute_median_s"] < rank["step_median_s"] and rank["wait_median_s"] >= 0
        assert rank["cpus"] == len(os.sched_getaffinity(0)) and rank["node_cpus"] == os.cpu_count()
    assert len(facts["series"]["mean_loss"]) == len(facts["series"]["step_time_s"]) == 60
    beats = [json.loads(line.split(HEARTBEAT_MARK, 1)[1]) for line in output.splitlines() if HEARTBEAT_MARK in line]
    assert {beat["r"] for beat in beats} == {0, 1} and beats[0]["w"] == "starting"


def test_perturbed_gradients_stop_the_training_naming_the_rank():
    output = torchrun("smoke_train.py", 3, "--steps", "100", "--inject-grad-fault", "1", "--inject-at-step", "5")
    facts = json.loads(output.split("PROVISION-TRAIN ", 1)[1].splitlines()[0])
    violation = facts["violation"]
    assert violation["check"] == "grad_norm_consistency" and violation["step"] == 5 and violation["ranks"] == [1]
    assert facts["steps_done"] == 6 and len(facts["ranks"]) == 3
    assert facts["parameter_checksums"][1] != facts["parameter_checksums"][0]


def test_infinite_gradient_is_its_own_failure_naming_the_rank():
    output = torchrun("smoke_train.py", 3, "--steps", "100", "--inject-grad-fault", "2", "--inject-at-step", "7",
                      "--inject-grad-value", "inf")
    result = {"name": "t", "instrument": "train", "scope": "training", "nodes": ["h"], "rc": 0, "stdout": output}
    checks = {c.id: c for c in criteria.training_checks(result, ["h"], tiny_judge())[0]}
    finite = checks["training.grad_norm_finite"]
    assert not finite.passed and finite.blamed == [socket.gethostname()]
    assert "step 7: non-finite gradient norm on ranks [2]" in finite.detail
    assert checks["training.grad_norm_consistency"].passed  # reported once, as what it is


def test_bf16_sweep_checks_exact_sums():
    facts = read_output("sweep", torchrun("sweep.py", 3, "--min-bytes", "64K", "--max-bytes", "128K",
                                          "--gradient-bytes", "64K", "--iters", "2", "--repeats", "1",
                                          "--dtype", "bfloat16"))
    assert facts["dtype"] == "bfloat16" and all(row["wrong"] == 0 for row in facts["rows"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("world", [2, 8, 23, 64, 512, 4096])
def test_sweep_check_values_sum_exactly_in_any_order(dtype: torch.dtype, world: int):
    contributions = [sweep.check_values(dtype, rank, world) for rank in range(world)]
    expected = contributions[0][1]
    assert sum(value != 0 for value, _ in contributions) >= 1
    order = list(range(world))
    for seed in range(3):  # partial sums in the type itself, in a random order each time
        random.Random(seed).shuffle(order)
        total = torch.zeros(1, dtype=dtype)
        for rank in order:
            total += torch.tensor([contributions[rank][0]], dtype=dtype)
        assert total.item() == expected
    if world * (world + 1) // 2 <= 256:  # small worlds: every rank's contribution differs
        assert len({value for value, _ in contributions}) == world


def test_a_cpu_run_on_a_gpu_node_is_refused_naming_host_and_rank():
    done = launch("sweep.py", 2, "--min-bytes", "64K", "--max-bytes", "64K", "--gradient-bytes", "64K",
                  "--require-cuda")
    assert done.returncode != 0
    # torchrun stops the other ranks once one exits: at least one says why.
    assert done.stdout.count("PROVISION-REFUSED ") >= 1 and "PROVISION-SWEEP" not in done.stdout
    with pytest.raises(Refused) as refused:
        read_output("sweep", done.stdout)
    assert refused.value.hosts == [socket.gethostname()]
    assert re.search(f"{socket.gethostname()} rank [01]: CUDA required but torch sees no GPU", str(refused.value))
    result = {"name": "sweep node h #1", "instrument": "sweep", "scope": "node", "nodes": ["h"],
              "rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    ran = criteria.communication_checks([result], tiny_judge())[0][0]
    assert not ran.passed and ran.blamed == [socket.gethostname()] and "refused to run on the CPU" in ran.detail
    trained = launch("smoke_train.py", 2, "--steps", "5", "--require-cuda")
    assert trained.returncode != 0 and trained.stdout.count("PROVISION-REFUSED ") >= 1


@pytest.mark.parametrize(("name", "tflops"), [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.0), ("NVIDIA H200 NVL", 835.0), ("NVIDIA L4", 121.0), ("NVIDIA L40", 181.0),
    ("NVIDIA L40S", 362.0), ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", 312.0), ("NVIDIA H20", None),
])
def test_peak_is_matched_by_the_whole_gpu_name(name: str, tflops: float | None):
    assert smoke_train.PEAK_BF16_TFLOPS.get(smoke_train.gpu_model_key(name)) == tflops


def test_flops_per_token_counts_matrix_weights_and_causal_attention():
    preset = smoke_train.PRESETS["tiny"]
    with torch.device("cpu"):
        model = smoke_train.Decoder(preset)
    weights = sum(p.numel() for p in model.parameters()) - preset.sequence * preset.width
    # Causal attention: half of PaLM's 12 x layers x width x sequence.
    attention = 6 * preset.layers * preset.width * preset.sequence
    assert smoke_train.flops_per_token(model, preset) == 6 * weights + attention


def test_throughput_leaves_the_warm_up_steps_out():
    done = launch("smoke_train.py", 1, "--steps", "25", "--warmup-steps", "5")
    facts = read_output("train", done.stdout)
    assert facts["warmup_steps"] == 5 and facts["steady_steps"] == 20
    assert facts["steady_s"] < facts["elapsed_s"]
    tokens = facts["steady_steps"] * facts["config"]["batch"] * facts["config"]["sequence"]
    assert facts["tokens_per_second"] == pytest.approx(tokens / facts["steady_s"])


def test_torch_check_reports_what_torch_sees():
    done = subprocess.run([sys.executable, str(PAYLOAD / "torch_check.py")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=True)
    facts = json.loads(done.stdout)
    assert facts["torch"] == torch.__version__ and facts["cuda_available"] is False
    assert facts["device_count"] == 0 and facts["all_reduce"] is None and facts["gloo_available"] is True


def test_a_resumed_training_repeats_the_steps_of_the_run_that_went_on_bitwise(tmp_path: Path):
    """Saved after 45 of 60 steps with torch.distributed.checkpoint, the run goes on; a new run
    loads it and trains steps 46-60: the same losses, gradient norms and parameters, bit for bit."""
    checkpoint = tmp_path / "checkpoint"
    reference = read_output("train", torchrun("smoke_train.py", 2, "--steps", "60", "--checkpoint-dir",
                                              str(checkpoint), "--save-at", "45"))
    assert reference["saved_at"] == 45 and checkpoint.is_dir()
    # each rank left the checksums of what it saved: the model's tensors and AdamW's moments
    saved = json.loads((checkpoint / "state-checksums-rank1.json").read_text())
    assert "model.blocks.1.mlp.0.weight" in saved
    assert any(name.startswith("optimizer.") and name.endswith("exp_avg_sq") for name in saved)
    resumed = read_output("train", torchrun("smoke_train.py", 2, "--steps", "60", "--checkpoint-dir",
                                            str(checkpoint), "--resume"))
    assert resumed["first_step"] == 45 and resumed["steps_done"] == 15
    checks, curves = criteria.resume_checks(reference, resumed)
    assert all(check.passed for check in checks), [check for check in checks if not check.passed]
    assert {check.id for check in checks} == {"training.resume.state", "training.resume.mean_loss",
                                              "training.resume.grad_norm", "training.resume.parameters"}
    assert curves["resumed_mean_loss"] == reference["series"]["mean_loss"][45:]
    # every rank compared what it loaded with what it saved, and found it the same
    assert resumed["resume_state"] == {"ranks_compared": 2, "differing": []}
    assert not checkpoint.exists()  # the resumed run removes the certification's checkpoint


def test_a_rank_that_resumes_from_a_perturbed_shard_is_named_with_its_tensor(tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    reference = read_output("train", torchrun("smoke_train.py", 2, "--steps", "30", "--checkpoint-dir",
                                              str(checkpoint), "--save-at", "20"))
    resumed = read_output("train", torchrun("smoke_train.py", 2, "--steps", "30", "--checkpoint-dir",
                                            str(checkpoint), "--resume", "--inject-resume-fault", "1"))
    checks = {check.id: check for check in criteria.resume_checks(reference, resumed)[0]}
    state = checks["training.resume.state"]
    host = socket.gethostname()
    assert not state.passed and state.blamed == [host]
    assert state.detail == f"rank 1 on {host}: model.blocks.1.mlp.0.weight differs"
    assert not checks["training.resume.mean_loss"].passed and checks["training.resume.mean_loss"].measured == 21
    assert not checks["training.resume.parameters"].passed
