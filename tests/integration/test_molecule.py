"""Every role's Molecule scenario runs for real (Docker, the lab's node image)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.lab.cluster import lab_dir
from provisioner.lab.engine import ensure_engine
from provisioner.lab.images import build_node_image

ROLES = Path(__file__).resolve().parents[2] / "roles"
SCENARIOS = sorted(path.parent.parent.parent.name for path in ROLES.glob("*/molecule/*/molecule.yml"))


@pytest.fixture(scope="session")
def node_image() -> str:
    ensure_engine(lab_dir())
    return build_node_image(lambda message: None)


def test_every_role_has_a_molecule_scenario():
    roles = sorted(path.name for path in ROLES.iterdir() if (path / "tasks").is_dir())
    assert roles and roles == SCENARIOS


@pytest.mark.lab
@pytest.mark.parametrize("role", SCENARIOS)
def test_molecule_scenario(role: str, node_image: str):
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                   "ANSIBLE_NOCOLOR": "1", "NO_COLOR": "1", "PY_COLORS": "0"}
    result = subprocess.run(["molecule", "test"], cwd=ROLES / role, capture_output=True, text=True,
                            env=environment, timeout=1200, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
