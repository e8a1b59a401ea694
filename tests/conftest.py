"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from provisioner.paths import PROJECT_ROOT

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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The time each test module took (setup, call and teardown together), slowest first, so
    the suite's budget is visible at the end of every run."""
    totals: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                module = report.nodeid.split("::", 1)[0]
                totals[module] = totals.get(module, 0.0) + report.duration
    if not totals:
        return
    terminalreporter.write_sep("=", "time per test module, slowest first")
    for module, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {module}")
    terminalreporter.write_line(f"{sum(totals.values()):8.1f} s  in all")
