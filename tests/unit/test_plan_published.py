"""`provision plan` held to published trainings (tests/fixtures/plan/published.yaml): each row's
step time within 25 %, MFU within 20 % and memory within 5 % of what its paper printed. A change
to the model that misses one fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner.plan.published import Comparison, compare, compare_model_states

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "plan" / "published.yaml"
DOCUMENT = yaml.safe_load(FIXTURE.read_text())
TRAININGS = DOCUMENT["trainings"]
ZERO = DOCUMENT["zero2020"]


def test_the_table_holds_at_least_ten_trainings_each_with_its_citation():
    assert len(TRAININGS) >= 10
    for row in TRAININGS:
        assert "Table" in row["source"] and row["row"], row["id"]
    assert len({row["id"] for row in TRAININGS}) == len(TRAININGS)


@pytest.mark.parametrize("row", TRAININGS, ids=[row["id"] for row in TRAININGS])
def test_a_published_training_is_predicted_within_the_tolerances(row: dict):
    result = compare(row)
    assert result.published_step_s is not None and result.published_mfu is not None
    assert abs(result.step_error) <= 0.25, (result.published_step_s, result.predicted_step_s)
    assert abs(result.mfu_error) <= 0.20, (result.published_mfu, result.predicted_mfu)


@pytest.mark.parametrize("row", ZERO["rows"], ids=[row["id"] for row in ZERO["rows"]])
def test_zeros_model_states_are_predicted_within_five_percent(row: dict):
    result = compare_model_states(ZERO, row)
    assert abs(result.memory_error) <= 0.05, (result.published_memory_gb, result.predicted_memory_gb)


def test_efficiency_rises_with_model_size_as_published():
    """Narayanan et al.: 44 % of peak at 1.7B to 52 % at 1T; the plan's MFU follows the trend."""
    mfu = {row["id"]: compare(row).plan_mfu for row in TRAININGS}
    assert mfu["narayanan-1008B"] > mfu["narayanan-18.4B"] and mfu["korthikanti-1T"] > mfu["korthikanti-22B"]


def test_a_prediction_outside_the_tolerance_fails():
    """Fail-closed: the check itself rejects a row the model misses."""
    row = {**TRAININGS[0], "published": {"step_time_s": 1.0, "mfu": 0.9}}
    result: Comparison = compare(row)
    assert abs(result.mfu_error) > 0.20 and abs(result.step_error) > 0.25
