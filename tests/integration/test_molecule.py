"""Every role's Molecule scenario runs for real (Docker, the lab's node image).

The scenarios run side by side, started by the `scenario_runs` fixture (tests/conftest.py)
as soon as the lab modules are done; these tests, ordered last, wait for them."""

from __future__ import annotations

import subprocess
from concurrent.futures import Future

import pytest

from provisioner.paths import ROLES_DIR
from tests.molecule_runs import SCENARIOS


def test_every_role_has_a_molecule_scenario():
    roles = sorted(path.name for path in ROLES_DIR.iterdir() if (path / "tasks").is_dir())
    assert roles and roles == SCENARIOS


@pytest.mark.lab
@pytest.mark.parametrize("role", SCENARIOS)
def test_molecule_scenario(role: str, scenario_runs: dict[str, Future[subprocess.CompletedProcess[str]]]):
    result = scenario_runs[role].result()
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
