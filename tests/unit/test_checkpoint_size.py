"""The target model's checkpoint: its size against published figures, its shards, the save
overhead, and `provision plan`'s checkpoint lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.plan.checkpoint import GIB, checkpoint, checkpoint_of, overhead
from provisioner.plan.run import PlanRequest, plan

# BLOOM-176B's model card (bigscience/bloom, "Speeds, Sizes, Times"): 176,247,271,424 parameters,
# bf16 mixed precision with Adam; "Bf16 weights: 329GB", "Full checkpoint with optimizer states:
# 2.3TB" (binary units: 329 GiB is 353 GB).
BLOOM_PARAMETERS = 176_247_271_424


def test_bloom_176b_checkpoint_matches_its_model_card():
    bloom = checkpoint_of("BLOOM-176B", BLOOM_PARAMETERS, ranks=384)
    weights = next(part for part in bloom.parts if part.name.startswith("weights"))
    assert weights.value == pytest.approx(329, rel=0.01)
    assert bloom.total_bytes / 2**40 == pytest.approx(2.3, rel=0.05)


def test_a_70b_mixed_precision_adam_checkpoint_is_about_a_terabyte():
    # 14 bytes per parameter: bf16 weights 2, fp32 master 4, Adam's two fp32 moments 8.
    target = checkpoint("70B", ranks=1024)
    assert target.parameters == pytest.approx(68.98e9, rel=1e-3)
    assert target.total_bytes == pytest.approx(68.98e9 * 14, rel=1e-3)
    assert 0.9e12 < target.total_bytes < 1.0e12
    assert target.shard_bytes == pytest.approx(target.total_bytes / 1024)
    assert target.per_node_bytes(128) == pytest.approx(target.total_bytes / 128)


def test_zero_paper_model_states_less_the_gradients():
    # Rajbhandari et al. 2020, section 3.1: a 7.5B model's states are (2 + 2 + K) x 7.5B = 120 GB
    # with K = 12 (fp32 master, momentum, variance); the gradients (2 bytes each) are not saved.
    target = checkpoint_of("7.5B", 7.5e9, ranks=64)
    assert target.total_bytes == pytest.approx(120e9 - 2 * 7.5e9)
    assert checkpoint_of("fp32", 1e9, ranks=1, precision="fp32").total_bytes == pytest.approx(12e9)
    assert checkpoint_of("sgd", 1e9, ranks=1, optimizer="sgd").total_bytes == pytest.approx(10e9)


def test_a_parameter_count_names_a_scaled_down_checkpoint():
    lab = checkpoint("20M", ranks=4)
    assert lab.total_bytes == pytest.approx(20e6 * 14) and lab.total_bytes / GIB < 0.5
    with pytest.raises(ValueError):
        checkpoint("a big one", ranks=4)


def test_overhead_of_a_blocking_save():
    # 150 s every 1,000 steps of 3 s: 150 / 3,150.
    assert overhead(150, 1000, 3.0).value == pytest.approx(150 / 3150)


def _certification(tmp_path: Path, storage: dict | None) -> Path:
    path = tmp_path / "certification.json"
    document = {"nodes": ["gpu01", "gpu02"], "medians_gbps": {
        "nccl-tests.node": {"gpu01": 455.0, "gpu02": 440.0}, "nccl-tests.all": {"gpu01+gpu02": 45.0}}}
    if storage is not None:
        document["storage"] = storage
    path.write_text(json.dumps(document))
    return path


def test_plan_prints_the_checkpoint_and_with_a_certification_its_save_and_overhead(tmp_path, capsys):
    nodes = {"gpu01": {"write_gbps": 2.0, "read_gbps": 4.0}, "gpu02": {"write_gbps": 1.6, "read_gbps": 3.5}}
    certification = _certification(tmp_path, {"nodes": nodes})
    document = plan(PlanRequest(model="70B", gpu="H100", nodes=16, certification=certification,
                                checkpoint_every=1000))
    saved = document["checkpoint"]
    per_node = saved["total_bytes"] / 16
    # the slowest node ends the save: 1.6 GB/s write, 3.5 GB/s read
    assert saved["save"]["save_s"] == pytest.approx(per_node / 1.6e9)
    assert saved["save"]["load_s"] == pytest.approx(per_node / 3.5e9)
    step_s = document["recommended"]["step_time_ms"] / 1e3
    assert saved["save"]["overhead"]["value"] == pytest.approx(
        saved["save"]["save_s"] / (1000 * step_s + saved["save"]["save_s"]))
    assert main(["plan", "--model", "70B", "--gpu", "H100", "--nodes", "16", "--certification", str(certification),
                 "--checkpoint-every", "1000"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint: 899.4 GiB" in out and "checkpoint every 1000 steps" in out


def test_checkpoint_every_needs_a_certification_with_the_storage_part(tmp_path, capsys):
    assert main(["plan", "--model", "70B", "--gpu", "H100", "--nodes", "2", "--checkpoint-every", "1000"]) == 2
    assert "--checkpoint-every: the overhead needs measured save times" in capsys.readouterr().err
    without = _certification(tmp_path, None)
    # Without --checkpoint-every a certification without the storage part is still read.
    assert main(["plan", "--model", "7B", "--gpu", "H100", "--nodes", "2", "--certification", str(without)]) == 0
    capsys.readouterr()
    assert main(["plan", "--model", "7B", "--gpu", "H100", "--nodes", "2", "--certification", str(without),
                 "--checkpoint-every", "500"]) == 2
    assert "certification.json: storage: holds no checkpoint storage measurement" in capsys.readouterr().err
    assert main(["plan", "--model", "7B", "--gpu", "H100", "--nodes", "2", "--checkpoint-every", "0"]) == 2
    assert "--checkpoint-every: must be positive" in capsys.readouterr().err
