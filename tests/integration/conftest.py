"""The lab, brought up once per test session (containers are reused when they match)."""

from __future__ import annotations

import subprocess

import pytest

from provisioner.lab import cluster
from provisioner.lab.state import default_node_state, write_state

LAB_NODES = 2
LAB_GPUS = 8


@pytest.fixture(scope="session")
def lab() -> dict[str, str]:
    """A running lab; returns node name -> address. Fails (never skips) when the lab cannot start."""
    statuses = cluster.lab_up(LAB_NODES, LAB_GPUS, log=lambda message: None)
    return {status.name: status.address for status in statuses}


@pytest.fixture
def healthy_lab(lab: dict[str, str]):
    """The lab with every GPU node's simulated hardware reset to healthy after the test."""
    yield lab
    for number in range(1, LAB_NODES + 1):
        node = cluster.gpu_node_name(number)
        write_state(cluster.node_hw_dir(node), default_node_state(number, LAB_GPUS))


def node_exec(node: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "exec", cluster.container_name(node), *command], capture_output=True,
                          text=True, check=False, timeout=60)
