"""The lab, brought up once per test session (containers are reused when they match)."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.cli import main
from provisioner.lab import cluster
from provisioner.lab.state import default_node_state, write_state
from provisioner.parsers import slurm
from tests.helpers import last_record

LAB_NODES = 2
LAB_GPUS = 8


@pytest.fixture(scope="session")
def lab() -> dict[str, str]:
    """A running lab; returns node name -> address. Fails (never skips) when the lab cannot start."""
    statuses = cluster.lab_up(LAB_NODES, LAB_GPUS, log=lambda message: None)
    return {status.name: status.address for status in statuses if status.role != "repo"}


@pytest.fixture(scope="session")
def first_apply(lab: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run record of the session's first `provision apply` of the lab (it must succeed)."""
    runs = tmp_path_factory.mktemp("provisioned-runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROVISION_RUNS_DIR", str(runs))
        assert main(["apply", "--inventory", "lab"]) == 0
    return last_record(runs)


@pytest.fixture(scope="session")
def provisioned_lab(lab: dict[str, str], first_apply: Path) -> dict[str, str]:
    """The lab after one successful `provision apply` (drivers installed, versions recorded)."""
    return lab


HEALTH_CHECK = "/usr/local/sbin/provision-node-health"


def reset_hardware() -> None:
    """Healthy hardware again, and no drain left by it: Slurm's periodic health check may have
    drained a node while a test broke its hardware; it resumes such a node on its next run,
    which here is run at once rather than up to an interval later."""
    for number in range(1, LAB_NODES + 1):
        node = cluster.gpu_node_name(number)
        write_state(cluster.node_hw_dir(node), default_node_state(number, LAB_GPUS, cluster.LAB_HCAS))
    for number in range(1, LAB_NODES + 1):
        node = cluster.gpu_node_name(number)
        subprocess.run(["docker", "exec", cluster.container_name(node), "sh", "-c",
                        f"[ ! -x {HEALTH_CHECK} ] || {HEALTH_CHECK}"], capture_output=True, check=False, timeout=60)


@pytest.fixture
def healthy_lab(provisioned_lab: dict[str, str]):
    """The provisioned lab, every GPU node's simulated hardware reset to healthy after the test."""
    yield provisioned_lab
    reset_hardware()


def sinfo_node(node: str, fields: str = "%T|%E") -> str:
    """The node's line of `sinfo --Node --format fields` on the controller: by default its state
    and reason ("idle|none", "drained|replace-node: build: ...", "down*|Not responding")."""
    return node_exec("ctl01", "sinfo", "--noheader", "--Node", "--nodes", node, "--format", fields).stdout.strip()


def gpu_node_out_of_service(node: str) -> bool:
    return any(slurm.out_of_service(state) for state in sinfo_node(node, "%T").split())


def gpu_nodes_in_service() -> None:
    """Resume every GPU node that Slurm holds out of service, and wait until it is idle again, so
    that a test starts from a lab in service even where an earlier test failed and left a node
    drained (replace-node and certify drain the nodes they fail, on purpose)."""
    for number in range(1, LAB_NODES + 1):
        node = cluster.gpu_node_name(number)
        if gpu_node_out_of_service(node):
            node_exec("ctl01", "scontrol", "update", f"nodename={node}", "state=resume")
            wait_for(lambda node=node: not gpu_node_out_of_service(node), 60,
                     f"{node} back in service")


@pytest.fixture
def runs(provisioned_lab, tmp_path):
    """The test's run records folder ($PROVISION_RUNS_DIR), on a lab whose GPU nodes are in service."""
    gpu_nodes_in_service()
    return tmp_path / "runs"


def node_exec(node: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "exec", cluster.container_name(node), *command], capture_output=True,
                          text=True, check=False, timeout=60)


def wait_for(predicate, timeout: float = 60, what: str = "condition", interval: float = 1):
    """Poll `predicate` until it returns something true (returned); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def throttle_storage(node: str, bytes_per_second: int) -> None:
    """Throttle (0: release) the node's block I/O to the disk under the lab's shared volume, as a
    slow or overloaded storage path would: the kernel's blkio throttle on the node container's
    cgroup (cgroup v1; v2's io.max where the machine has it), for reads and writes."""
    mountpoint = subprocess.run(["docker", "volume", "inspect", "--format", "{{.Mountpoint}}",
                                 cluster.SHARED_VOLUME], capture_output=True, text=True, check=True).stdout.strip()
    device = os.stat(mountpoint).st_dev
    major, minor = os.major(device), os.minor(device)
    partition = Path(f"/sys/dev/block/{major}:{minor}")
    if (partition / "partition").exists():  # throttle rules name the whole disk
        major, minor = (int(n) for n in (partition.resolve().parent / "dev").read_text().split(":"))
    container = subprocess.run(["docker", "inspect", "--format", "{{.Id}}", cluster.container_name(node)],
                               capture_output=True, text=True, check=True).stdout.strip()
    v1 = Path("/sys/fs/cgroup/blkio/docker") / container
    if v1.is_dir():
        for direction in ("read", "write"):
            (v1 / f"blkio.throttle.{direction}_bps_device").write_text(f"{major}:{minor} {bytes_per_second}\n")
        return
    v2 = next(Path("/sys/fs/cgroup").glob(f"**/docker-{container}.scope"), None) or next(
        Path("/sys/fs/cgroup").glob(f"**/{container}"), None)
    assert v2 is not None, f"no cgroup of {node}'s container"
    limit = bytes_per_second or "max"
    (v2 / "io.max").write_text(f"{major}:{minor} rbps={limit} wbps={limit}\n")


def monitoring_api(address: str, port: int, path: str, **params: str) -> Any:
    """GET a lab monitoring endpoint's JSON as Prometheus does: HTTPS checked against the
    lab's cluster CA, with the inventory's basic-auth password."""
    inventory = cluster.lab_inventory_dir()
    password = yaml.safe_load((inventory / "group_vars" / "all.yml").read_text())["monitoring_web_password"]
    context = ssl.create_default_context(cafile=str(inventory / ".provision-ca" / "ca.crt"))
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    request = urllib.request.Request(f"https://{address}:{port}{path}{query}", headers={
        "Authorization": "Basic " + base64.b64encode(f"provision:{password}".encode()).decode()})
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return json.loads(response.read())
