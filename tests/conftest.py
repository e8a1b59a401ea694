"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Real outputs of the vendor tools, from real clusters (their sources: tests/fixtures/README.md).
REAL_OUTPUTS = PROJECT_ROOT / "tests" / "fixtures"


@pytest.fixture
def example_inventory(tmp_path: Path) -> Path:
    """A private copy of inventory/example to break in a test."""
    target = tmp_path / "inv"
    shutil.copytree(PROJECT_ROOT / "inventory" / "example", target)
    return target


@pytest.fixture
def real_outputs() -> Path:
    """The folder of real tool outputs shipped with the tests."""
    return REAL_OUTPUTS


@pytest.fixture(autouse=True)
def _runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run records of a test go to its own folder, never the project's runs/."""
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(tmp_path / "runs"))


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


# Lab modules that measure the machine (bus bandwidth, step times) run after every other test:
# the Molecule scenarios, started with the session, overlap the rest (their results come last).
MEASURING_MODULES = ("test_lab_certify", "test_lab_swap_node", "test_lab_swap_service_host", "test_lab_upgrade")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The session's order: the tests that measure nothing, then the lab modules that measure
    (in their own order: test_lab_upgrade reboots the nodes, last), then Molecule's outcomes."""

    def group(item: pytest.Item) -> int:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        return 2 if module == "test_molecule" else int(module in MEASURING_MODULES)

    items.sort(key=group)
