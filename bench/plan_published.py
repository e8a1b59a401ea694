"""Published trainings beside `provision plan`'s predictions: step time, MFU, memory.

Run: .venv/bin/python bench/plan_published.py [tests/fixtures/plan/published.yaml]
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from provisioner.plan.published import Comparison, compare, compare_model_states

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "plan" / "published.yaml"


def comparisons(path: Path = FIXTURE) -> list[Comparison]:
    document = yaml.safe_load(path.read_text())
    rows = [compare(row) for row in document["trainings"]]
    zero = document["zero2020"]
    return rows + [compare_model_states(zero, row) for row in zero["rows"]]


def _cell(value: float | None, scale: float = 1.0, digits: int = 3) -> str:
    return "-" if value is None else f"{value * scale:.{digits}g}"


def _error(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE
    print(f"{'row':22} {'step s':>7} {'pred':>7} {'err':>5} {'MFU %':>6} {'pred':>5} {'err':>5} "
          f"{'mem GB':>6} {'pred':>6} {'err':>5}")
    for c in comparisons(path):
        print(f"{c.id:22} {_cell(c.published_step_s):>7} {_cell(c.predicted_step_s):>7} {_error(c.step_error):>5} "
              f"{_cell(c.published_mfu, 100):>6} {_cell(c.predicted_mfu, 100):>5} {_error(c.mfu_error):>5} "
              f"{_cell(c.published_memory_gb):>6} {_cell(c.predicted_memory_gb):>6} {_error(c.memory_error):>5}")


if __name__ == "__main__":
    main()
