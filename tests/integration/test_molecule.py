"""Every role's Molecule scenario runs for real (Docker, the lab's node image).

The scenarios start side by side at the beginning of the session (`molecule_runs` in this
folder's conftest) and overlap the lab tests that measure nothing; each is still its own test
here, with its own outcome and log."""

from __future__ import annotations

import subprocess
from concurrent.futures import Future

import pytest

from .conftest import ROLES, SCENARIOS


def test_every_role_has_a_molecule_scenario():
    roles = sorted(path.name for path in ROLES.iterdir() if (path / "tasks").is_dir())
    assert roles and roles == SCENARIOS


@pytest.mark.lab
@pytest.mark.parametrize("role", SCENARIOS)
def test_molecule_scenario(role: str, molecule_runs: dict[str, Future[subprocess.CompletedProcess[str]]]):
    result = molecule_runs[role].result()
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
