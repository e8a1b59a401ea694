"""Every role's Molecule scenario, run for real (Docker, the lab's node image), side by side.

The scenarios share nothing (their own containers, network and Molecule state) and spend most
of their time waiting on apt, pip and container round trips, so they run side by side
(`PROVISION_MOLECULE_PARALLEL`, default 3), longest first. They start once the lab modules are
done, beside the tests that need no lab (unit tests, the local runner, the certification
payload): started beside the lab tests, whose timings they would disturb, they only slowed
those (this machine's two CPUs were busy either way). Each scenario is still its own test
(tests/integration/test_molecule.py), with its own outcome and log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from provisioner.paths import ROLES_DIR

SCENARIOS = sorted(path.parent.parent.parent.name for path in ROLES_DIR.glob("*/molecule/*/molecule.yml"))
SCENARIO_TIMEOUT_S = 1500
# The longest scenarios start first, so that the pool does not end on one of them alone
# (gpu_driver, started in the second wave, was the last to end in a whole run).
LONGEST_FIRST = ["slurm", "gpu_driver", "certification", "firmware", "monitoring", "infiniband"]
# Each scenario's own wall time (seconds) in this run, for the time table at the end.
SCENARIO_SECONDS: dict[str, float] = {}


def run_scenario(role: str) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    try:
        return _molecule_test(role)
    finally:
        SCENARIO_SECONDS[role] = time.monotonic() - started


def _molecule_test(role: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
                   "ANSIBLE_NOCOLOR": "1", "NO_COLOR": "1", "PY_COLORS": "0"}
    try:
        return subprocess.run(["molecule", "test"], cwd=ROLES_DIR / role, capture_output=True, text=True,
                              env=environment, timeout=SCENARIO_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode(errors="replace") if isinstance(expired.stdout, bytes) else (
            expired.stdout or "")
        return subprocess.CompletedProcess(expired.cmd, 124, output, f"timed out after {SCENARIO_TIMEOUT_S} s")


@contextmanager
def scenarios_started(roles: list[str]) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The scenarios of these roles, started side by side; each test waits for its own."""
    from provisioner.lab.cluster import prepare_lab_files

    ordered = sorted(roles, key=lambda role: LONGEST_FIRST.index(role) if role in LONGEST_FIRST
                     else len(LONGEST_FIRST))
    # The node image, the lab's apt repository and wheelhouse: the scenarios install from them.
    prepare_lab_files(log=lambda message: None)
    workers = max(1, int(os.environ.get("PROVISION_MOLECULE_PARALLEL", "3")))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="molecule") as pool:
        yield {role: pool.submit(run_scenario, role) for role in ordered}
