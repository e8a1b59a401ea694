"""Every role's Molecule scenario runs for real (Docker, the lab's node image).

The scenarios share nothing (their own containers, network and Molecule state), and spend
most of their time waiting on apt, pip and container round trips, so they run side by side
(`PROVISION_MOLECULE_PARALLEL`, default 3) once the first of these tests asks for them:
after the lab modules, whose timing measurements they would otherwise disturb (started
beside the lab tests that measure nothing, they only slowed those: this machine's two CPUs
were busy either way). Each scenario is still its own test, with its own outcome and log."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from provisioner.lab.cluster import prepare_lab_files

ROLES = Path(__file__).resolve().parents[2] / "roles"
SCENARIOS = sorted(path.parent.parent.parent.name for path in ROLES.glob("*/molecule/*/molecule.yml"))
SCENARIO_TIMEOUT_S = 1500
# The longest scenarios start first, so that the pool does not end on one of them alone
# (slurm takes about as long as the others on two workers; alphabetical order started it last).
LONGEST_FIRST = ["slurm", "certification", "firmware", "monitoring", "infiniband"]


def run_scenario(role: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                   "ANSIBLE_NOCOLOR": "1", "NO_COLOR": "1", "PY_COLORS": "0"}
    try:
        return subprocess.run(["molecule", "test"], cwd=ROLES / role, capture_output=True, text=True,
                              env=environment, timeout=SCENARIO_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode(errors="replace") if isinstance(expired.stdout, bytes) else (
            expired.stdout or "")
        return subprocess.CompletedProcess(expired.cmd, 124, output, f"timed out after {SCENARIO_TIMEOUT_S} s")


@pytest.fixture(scope="session")
def scenario_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The selected scenarios, started side by side; each test waits for its own."""
    selected = [item.callspec.params["role"] for item in request.session.items
                if item.originalname == "test_molecule_scenario" and hasattr(item, "callspec")]
    selected.sort(key=lambda role: LONGEST_FIRST.index(role) if role in LONGEST_FIRST else len(LONGEST_FIRST))
    # The node image, the lab's apt repository and wheelhouse: the scenarios install from them.
    prepare_lab_files(log=lambda message: None)
    workers = max(1, int(os.environ.get("PROVISION_MOLECULE_PARALLEL", "3")))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="molecule") as pool:
        yield {role: pool.submit(run_scenario, role) for role in selected}


def test_every_role_has_a_molecule_scenario():
    roles = sorted(path.name for path in ROLES.iterdir() if (path / "tasks").is_dir())
    assert roles and roles == SCENARIOS


@pytest.mark.lab
@pytest.mark.parametrize("role", SCENARIOS)
def test_molecule_scenario(role: str, scenario_runs: dict[str, Future[subprocess.CompletedProcess[str]]]):
    result = scenario_runs[role].result()
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
