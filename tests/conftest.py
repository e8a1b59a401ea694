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


MOLECULE_TEST = "test_molecule_scenario"


# The lab modules in the order they run: replace-node rebuilds machines, upgrade reboots the
# GPU nodes, the wider fleet grows the lab to three GPU nodes and back; each leaves the lab in
# service for the next. A lab module not named here runs after these.
LAB_MODULE_ORDER = ["test_lab_apply.py", "test_lab_certify.py", "test_lab_fabric.py", "test_lab_monitoring.py",
                    "test_lab_slurm.py", "test_lab_replace_node.py", "test_lab_replace_service_host.py",
                    "test_lab_upgrade.py", "test_lab_wider_fleet.py"]


def _run_group(item: pytest.Item) -> int:
    """0: the lab modules; 1: everything that needs no lab; 2: the Molecule scenarios, which run
    beside group 1."""
    if getattr(item, "originalname", "") == MOLECULE_TEST:
        return 2
    return 0 if item.get_closest_marker("lab") else 1


def _run_order(item: pytest.Item) -> tuple[int, int]:
    module = item.path.name
    return _run_group(item), LAB_MODULE_ORDER.index(module) if module in LAB_MODULE_ORDER else len(LAB_MODULE_ORDER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_run_order)  # stable: each module keeps its tests' order


def _molecule_roles(session: pytest.Session) -> list[str]:
    return [item.callspec.params["role"] for item in session.items
            if getattr(item, "originalname", "") == MOLECULE_TEST and hasattr(item, "callspec")]


@pytest.fixture(scope="session")
def scenario_runs(request: pytest.FixtureRequest):
    """The selected Molecule scenarios, started side by side (tests/molecule_runs.py)."""
    from tests.molecule_runs import scenarios_started

    with scenarios_started(_molecule_roles(request.session)) as runs:
        yield runs


@pytest.fixture(autouse=True)
def _molecule_beside_the_tests_without_lab(request: pytest.FixtureRequest) -> None:
    """Once the lab modules are done, the Molecule scenarios start (when selected) and run
    beside the tests that need no lab."""
    if _run_group(request.node) == 1 and _molecule_roles(request.session):
        request.getfixturevalue("scenario_runs")


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
    from tests.molecule_runs import SCENARIO_SECONDS

    if SCENARIO_SECONDS:
        terminalreporter.write_sep("-", "Molecule scenarios, each its own wall time (they run side by side)")
        for role, seconds in sorted(SCENARIO_SECONDS.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{seconds:8.1f} s  {role}")
