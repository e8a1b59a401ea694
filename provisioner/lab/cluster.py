"""The local lab: a controller and N GPU-node containers running systemd, reached over SSH.

Ansible reaches the lab exactly as it reaches real nodes: SSH with a key the lab generates,
host keys recorded in a known_hosts file (strict checking), an unprivileged `provision`
user and `become`. Every Docker object the lab creates carries the label `provision.lab`;
the lab only ever touches objects with that label.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from provisioner.lab import certify_files
from provisioner.lab import state as hw_state
from provisioner.lab.apt_repo import build_apt_repo
from provisioner.lab.engine import EngineError, docker, ensure_engine
from provisioner.lab.images import NODE_IMAGE, build_node_image
from provisioner.lab.inventory import write_lab_inventory
from provisioner.lab.layout import (
    CONTAINER_PREFIX,
    CONTROLLER,
    CONTROLLER_OFFSET,
    FIXED_SUBNET_LABEL,
    LAB_HCAS,
    LABEL,
    NETWORK,
    REPLACEMENT_OFFSET,
    REPO,
    REPO_OFFSET,
    REPO_PORT,
    SHARED_CHECKPOINTS,
    SHARED_CLUSTER_STATE,
    SHARED_MOUNT,
    SHARED_VOLUME,
    container_name,
    gpu_node_name,
    node_dir,
    node_hw_dir,
)
from provisioner.lab.ssh import keygen, ssh_reachable, write_known_hosts
from provisioner.paths import lab_dir, lab_inventory_dir


@dataclass
class NodeStatus:
    name: str
    container: str
    role: str
    state: str
    address: str | None
    ssh: bool | None = None


def _labelled(kind: str) -> list[str]:
    """The lab's containers, networks or volumes. A container is the lab's by `provision.lab=node`:
    every container made from the node image inherits the image's `provision.lab=image` (Molecule's
    scenarios run on it), and the lab must neither list nor remove those."""
    command = {"container": ["ps", "-a"], "network": ["network", "ls"], "volume": ["volume", "ls"]}[kind]
    label = f"{LABEL}=node" if kind == "container" else LABEL
    result = docker(*command, "--filter", f"label={label}", "--format", "{{.Names}}" if kind == "container"
                    else "{{.Name}}")
    return [name for name in result.stdout.split() if name]


def _inspect(container: str) -> dict | None:
    result = docker("inspect", container, check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)[0]


def _address(details: dict) -> str | None:
    network = details.get("NetworkSettings", {}).get("Networks", {}).get(NETWORK)
    return (network or {}).get("IPAddress") or None


def apt_repo_dir() -> Path:
    return lab_dir() / "apt"


def lab_instance() -> str:
    """This lab folder's identity (made once with the folder). A container made for a folder
    that was deleted and made again at the same path holds mounts of the deleted one (old
    keys, old hardware state): it must not be reused."""
    stamp = lab_dir() / "instance-id"
    if not stamp.exists():
        lab_dir().mkdir(parents=True, exist_ok=True)
        stamp.write_text(uuid.uuid4().hex + "\n")
    return stamp.read_text().strip()


def _made_for_this_lab(details: dict) -> bool:
    labels = details["Config"]["Labels"]
    return labels.get(f"{LABEL}.dir") == str(lab_dir()) and labels.get(f"{LABEL}.instance") == lab_instance()


def _start_repo(image_id: str, log: Callable[[str], None]) -> None:
    """The lab's package mirror: an HTTP server over .lab/apt on the lab network (alias `repo`)."""
    name = container_name(REPO)
    details = _inspect(name)
    reusable = (details is not None and details["Image"] == image_id and details["State"]["Running"]
                and _made_for_this_lab(details))
    if reusable:
        return
    if details is not None:
        docker("rm", "--force", name)
    log("starting the lab package repository")
    docker("run", "--detach", "--name", name, "--hostname", REPO, "--network", NETWORK, "--network-alias", REPO,
           "--ip", _fixed_address(node_offset(REPO)), "--restart", "unless-stopped",
           "--label", f"{LABEL}=node", "--label", f"{LABEL}.role=repo", "--label", f"{LABEL}.dir={lab_dir()}",
           "--label", f"{LABEL}.instance={lab_instance()}", "--volume", f"{apt_repo_dir()}:/srv/repo:ro", NODE_IMAGE,
           "python3", "-m", "http.server", str(REPO_PORT), "--directory", "/srv/repo")


def _prepare_node_files(node: str, number: int, gpus: int, reset_state: bool) -> None:
    ssh_dir = node_dir(node) / "ssh"
    keygen(ssh_dir / "ssh_host_ed25519_key", f"host key of lab node {node}")
    public_key = (lab_dir() / "ssh" / "id_ed25519.pub").read_text()
    (ssh_dir / "authorized_keys").write_text(public_key)
    os.chmod(ssh_dir / "authorized_keys", 0o644)
    hw = node_hw_dir(node)
    if reset_state or not (hw / hw_state.STATE_FILE_NAME).exists():
        hw_state.write_state(hw, hw_state.default_node_state(number, gpus, LAB_HCAS if gpus else 0))


NETWORK_ATTEMPTS = 3


def _subnet() -> ipaddress.IPv4Network:
    details = json.loads(docker("network", "inspect", NETWORK).stdout)[0]
    return ipaddress.ip_network(details["IPAM"]["Config"][0]["Subnet"])


def _ensure_network(log: Callable[[str], None]) -> None:
    """The lab network, with a subnet of its own so that every machine keeps its address across
    restarts (Docker hands a restarted container any free address unless it was given one).
    The subnet is one Docker picks as free on this machine (a probe network's); another network
    made between the probe and the lab's (Molecule's, say) can take it first: then a new probe."""
    networks = _labelled("network")
    if NETWORK in networks:
        labels = json.loads(docker("network", "inspect", NETWORK).stdout)[0].get("Labels") or {}
        if labels.get(FIXED_SUBNET_LABEL) == "fixed":
            return
        log("replacing the lab network (made without fixed addresses) and its machines")
        for container in _labelled("container"):
            docker("rm", "--force", container)
        docker("network", "rm", NETWORK)
    probe = f"{NETWORK}-probe"
    for attempt in range(1, NETWORK_ATTEMPTS + 1):
        docker("network", "rm", probe, check=False)
        docker("network", "create", "--label", f"{LABEL}=probe", probe)
        subnet = json.loads(docker("network", "inspect", probe).stdout)[0]["IPAM"]["Config"][0]["Subnet"]
        docker("network", "rm", probe)
        made = docker("network", "create", "--label", f"{LABEL}=network", "--label", f"{FIXED_SUBNET_LABEL}=fixed",
                      "--subnet", subnet, NETWORK, check=attempt == NETWORK_ATTEMPTS)
        if made.returncode == 0:
            return
        log(f"subnet {subnet} was taken meanwhile ({made.stderr.strip()}); probing again")


def _fixed_address(offset: int) -> str:
    return str(_subnet().network_address + offset)


def node_offset(node: str) -> int:
    """A lab machine's place on the lab network (see REPO_OFFSET)."""
    if node == REPO:
        return REPO_OFFSET
    if node == CONTROLLER:
        return CONTROLLER_OFFSET
    return CONTROLLER_OFFSET + int(node.removeprefix("gpu"))


def _free_replacement_address() -> str:
    """An address no lab machine holds, for a machine that replaces another (a new address, as
    a new server gets)."""
    taken = {s.address for s in lab_status() if s.address}
    subnet = _subnet()
    for offset in range(REPLACEMENT_OFFSET, subnet.num_addresses - 1):
        candidate = str(subnet.network_address + offset)
        if candidate not in taken:
            return candidate
    raise EngineError(f"no free address left on {NETWORK}")


def _create_container(node: str, role: str, gpus: int, name: str | None = None, address: str | None = None) -> None:
    """A lab machine: systemd as PID 1, restarted by Docker when it reboots (systemd's reboot
    ends the container), at a fixed address."""
    docker(
        "run", "--detach", "--name", name or container_name(node), "--hostname", node,
        "--network", NETWORK, "--network-alias", node,
        "--ip", address or _fixed_address(node_offset(node)), "--restart", "unless-stopped",
        "--label", f"{LABEL}=node", "--label", f"{LABEL}.role={role}", "--label", f"{LABEL}.gpus={gpus}",
        "--label", f"{LABEL}.dir={lab_dir()}", "--label", f"{LABEL}.instance={lab_instance()}",
        "--privileged", "--cgroupns=host", "--volume", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--tmpfs", "/run", "--tmpfs", "/run/lock",
        "--volume", f"{SHARED_VOLUME}:{SHARED_MOUNT}",
        "--volume", f"{node_dir(node) / 'ssh'}:/etc/ssh/lab:ro",
        "--volume", f"{node_hw_dir(node)}:{hw_state.NODE_STATE_MOUNT}",
        NODE_IMAGE, "/lib/systemd/systemd",
    )


def _wait_for_boot(node: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        result = docker("exec", container_name(node), "systemctl", "is-system-running", check=False, timeout=30)
        state = result.stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(1)
    raise EngineError(f"lab node {node} did not finish booting within {timeout:.0f} s (systemd says {state!r})")


def _wanted_nodes(nodes: int) -> list[tuple[str, str, int]]:
    return [(CONTROLLER, "controller", 0)] + [(gpu_node_name(n), "gpu", n) for n in range(1, nodes + 1)]


def _write_config(nodes: int, gpus_per_node: int) -> None:
    (lab_dir() / "lab.json").write_text(json.dumps({"nodes": nodes, "gpus_per_node": gpus_per_node}))


def prepare_lab_files(log: Callable[[str], None] = print) -> None:
    """What the lab's machines and the roles' Molecule scenarios share, each made once per
    recipe: a running Docker engine, the node image, the lab's apt repository (stand-in vendor
    packages) and the certification toolkit's wheelhouse and nccl-tests source."""
    directory = lab_dir()
    directory.mkdir(parents=True, exist_ok=True)
    log(ensure_engine(directory))
    build_node_image(log)
    build_apt_repo(apt_repo_dir())
    certify_files.publish(apt_repo_dir(), directory / "wheelhouse", log)


def lab_up(nodes: int = 2, gpus_per_node: int = 8, log: Callable[[str], None] = print,
           reset_state: bool = True) -> list[NodeStatus]:
    """Bring the lab up (reusing matching containers); returns each node's status."""
    if nodes < 1 or not 1 <= gpus_per_node <= 16:
        raise ValueError("the lab needs at least 1 GPU node and 1 to 16 GPUs per node")
    directory = lab_dir()
    prepare_lab_files(log)
    keygen(directory / "ssh" / "id_ed25519", "lab operator key")
    _ensure_network(log)
    if SHARED_VOLUME not in _labelled("volume"):
        docker("volume", "create", "--label", f"{LABEL}=volume", SHARED_VOLUME)

    wanted = _wanted_nodes(nodes)
    wanted_names = {container_name(node) for node, _, _ in wanted} | {container_name(REPO)}
    for leftover in set(_labelled("container")) - wanted_names:
        log(f"removing lab container {leftover} (not part of a {nodes}-node lab)")
        docker("rm", "--force", leftover)
    image_id = docker("image", "inspect", "--format", "{{.Id}}", NODE_IMAGE).stdout.strip()
    _start_repo(image_id, log)

    addresses: dict[str, str] = {}
    for node, role, number in wanted:
        gpus = gpus_per_node if role == "gpu" else 0
        details = _inspect(container_name(node))
        reusable = (
            details is not None
            and details["Image"] == image_id
            and details["Config"]["Labels"].get(f"{LABEL}.gpus") == str(gpus)
            and _made_for_this_lab(details)
        )
        if details is not None and not reusable:
            log(f"replacing lab container {container_name(node)} (made for another image, size or lab folder)")
            docker("rm", "--force", container_name(node))
        _prepare_node_files(node, number, gpus, reset_state=reset_state or not reusable)
        if not reusable:
            log(f"starting lab node {node}")
            _create_container(node, role, gpus)
            if role == "controller" and reset_state:
                # A new controller without --keep-state starts a new cluster: what an earlier lab
                # (or another lab folder) left on the shared volume is not its state.
                docker("exec", container_name(node), "rm", "-rf", *SHARED_CLUSTER_STATE)
        elif not details["State"]["Running"]:
            docker("start", container_name(node))
    for node, _role, _number in wanted:
        # The node's GPU device files are made at boot (lab-gpu-devices.service), as a driver makes them.
        _wait_for_boot(node)
        address = _address(_inspect(container_name(node)) or {})
        if address is None:
            raise EngineError(f"lab node {node} has no address on network {NETWORK}")
        addresses[node] = address
    # The directory the lab's checkpoints filesystem binds, as a site's filesystem holds it.
    docker("exec", container_name(CONTROLLER), "mkdir", "-p", SHARED_CHECKPOINTS)
    write_known_hosts(addresses)
    _write_config(nodes, gpus_per_node)
    inventory = write_lab_inventory(addresses, gpus_per_node)
    log(f"inventory written: {inventory}")
    statuses = lab_status(check_ssh=True)
    unreachable = [status.name for status in statuses if status.role != "repo" and not status.ssh]
    if unreachable:
        raise EngineError(f"lab nodes not reachable over SSH: {', '.join(unreachable)}")
    return statuses


def lab_status(check_ssh: bool = False) -> list[NodeStatus]:
    statuses = []
    for container in sorted(_labelled("container")):
        details = _inspect(container)
        if details is None:
            continue
        address = _address(details)
        running = details["State"]["Running"]
        status = NodeStatus(
            name=container.removeprefix(CONTAINER_PREFIX),
            container=container,
            role=details["Config"]["Labels"].get(f"{LABEL}.role", "?"),
            state="running" if running else details["State"]["Status"],
            address=address,
        )
        if check_ssh and running and address and status.role != "repo":
            status.ssh = ssh_reachable(address)
        statuses.append(status)
    return statuses


def lab_down(log: Callable[[str], None] = print) -> None:
    """Remove every lab container, the network, the shared volume and the lab inventory."""
    from provisioner.lab.engine import engine_running

    if engine_running():
        for container in _labelled("container"):
            log(f"removing {container}")
            docker("rm", "--force", container)
        for network in _labelled("network"):
            docker("network", "rm", network)
        for volume in _labelled("volume"):
            docker("volume", "rm", "--force", volume)
    inventory = lab_inventory_dir()
    for path in sorted(inventory.rglob("*"), reverse=True) if inventory.exists() else []:
        path.unlink() if path.is_file() else path.rmdir()
    if inventory.exists():
        inventory.rmdir()
    nodes = lab_dir() / "nodes"
    if nodes.exists():
        subprocess.run(["rm", "-rf", str(nodes)], check=True)


def replace_machine(node: str, log: Callable[[str], None] = print) -> str:
    """Destroy a lab machine (a GPU node or the controller) and start a bare one in its place,
    as a hardware swap does: a fresh container from the base image, a new address, a new SSH
    host key (and for a GPU node new GPU serials and HCA GUIDs). What lives on the shared
    volume (the lab's stand-in for NFS) stays. The lab inventory gets the new address (what an
    operator writes into the inventory for the new machine); known_hosts is left alone
    (replace-node refreshes it). Returns the new address."""
    config = json.loads((lab_dir() / "lab.json").read_text())
    gpus = int(config["gpus_per_node"])
    gpu_nodes = {gpu_node_name(n) for n in range(1, int(config["nodes"]) + 1)}
    if node not in gpu_nodes | {CONTROLLER}:
        raise ValueError(f"{node} is not a machine of this lab")
    role, node_gpus = ("gpu", gpus) if node in gpu_nodes else ("controller", 0)
    old = _address(_inspect(container_name(node)) or {})
    for key in (node_dir(node) / "ssh").glob("ssh_host_*"):
        key.unlink()
    number = int(node.removeprefix("gpu")) if role == "gpu" else 0
    _prepare_node_files(node, number, node_gpus, reset_state=False)
    # Another machine: other serials, UUIDs and GUIDs (the number only seeds the identifiers).
    hw_state.write_state(node_hw_dir(node), hw_state.default_node_state(
        number + 100, node_gpus, LAB_HCAS if node_gpus else 0))
    # The new machine starts while the old one still holds its address, so it gets another.
    incoming = container_name(f"{node}-incoming")
    docker("rm", "--force", incoming, check=False)
    log(f"starting a bare {node} beside the old one ({old})")
    _create_container(node, role, node_gpus, name=incoming, address=_free_replacement_address())
    log(f"destroying the old {node}")
    docker("rm", "--force", container_name(node))
    docker("rename", incoming, container_name(node))
    _wait_for_boot(node)
    addresses = {s.name: s.address for s in lab_status() if s.role != "repo" and s.address}
    write_lab_inventory(addresses, gpus)
    return addresses[node]


def replace_gpu_node(node: str, log: Callable[[str], None] = print) -> str:
    """A GPU node's hardware swap (see replace_machine)."""
    if node == CONTROLLER:
        raise ValueError(f"{node} is not a GPU node of this lab")
    return replace_machine(node, log)
