"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = PROJECT_ROOT.parent / "shared" / "fixtures"


@pytest.fixture
def example_inventory(tmp_path: Path) -> Path:
    """A private copy of inventory/example to break in a test."""
    target = tmp_path / "inv"
    shutil.copytree(PROJECT_ROOT / "inventory" / "example", target)
    return target


@pytest.fixture
def shared_fixtures() -> Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"real tool outputs not available: {SHARED_FIXTURES} is absent (see ../shared/fixtures)")
    return SHARED_FIXTURES


@pytest.fixture(autouse=True)
def _runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run records of a test go to its own folder, never the project's runs/."""
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(tmp_path / "runs"))


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
