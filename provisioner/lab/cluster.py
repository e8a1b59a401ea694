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
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from provisioner.lab import certify_files
from provisioner.lab import state as hw_state
from provisioner.lab.apt_repo import build_apt_repo, lab_cuda_packages
from provisioner.lab.engine import EngineError, docker, ensure_engine, host_lacks_sys_resource
from provisioner.lab.images import NODE_IMAGE, build_node_image
from provisioner.paths import lab_dir, lab_inventory_dir

LABEL = "provision.lab"
NETWORK = "provision-lab"
SHARED_VOLUME = "provision-lab-shared"
SHARED_MOUNT = "/shared"
# What the lab keeps on the shared volume for the cluster (its stand-in for NFS).
SHARED_CLUSTER_STATE = (f"{SHARED_MOUNT}/slurm", f"{SHARED_MOUNT}/monitoring")
CONTAINER_PREFIX = "provision-lab-"
CONTROLLER = "ctl01"
REPO = "repo"
REPO_PORT = 8080
LAB_HCAS = 2
LAB_USER = "provision"
# Addresses on the lab network: the repository, the controller and GPU node N at fixed offsets
# (a restarted container, like a rebooted machine, keeps its address); replacement machines
# from REPLACEMENT_OFFSET up.
REPO_OFFSET, CONTROLLER_OFFSET, REPLACEMENT_OFFSET = 2, 3, 100
FIXED_SUBNET_LABEL = f"{LABEL}.subnet"




def gpu_node_name(number: int) -> str:
    return f"gpu{number:02d}"


def container_name(node: str) -> str:
    return CONTAINER_PREFIX + node


def node_dir(node: str) -> Path:
    return lab_dir() / "nodes" / node


def node_hw_dir(node: str) -> Path:
    """The folder holding `node`'s simulated hardware state (mounted at /var/lib/lab-hw)."""
    return node_dir(node) / "hw"


@dataclass
class NodeStatus:
    name: str
    container: str
    role: str
    state: str
    address: str | None
    ssh: bool | None = None


def _ssh_keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)


def _ssh_args(address: str) -> list[str]:
    directory = lab_dir()
    return [
        "ssh", "-i", str(directory / "ssh" / "id_ed25519"), "-o", f"UserKnownHostsFile={directory / 'known_hosts'}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
        "--", f"{LAB_USER}@{address}",
    ]


def ssh_reachable(address: str) -> bool:
    result = subprocess.run([*_ssh_args(address), "sudo", "-n", "true"], capture_output=True, check=False,
                            timeout=30)
    return result.returncode == 0


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
    _ssh_keygen(ssh_dir / "ssh_host_ed25519_key", f"host key of lab node {node}")
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


def host_key_fingerprint(node: str) -> str:
    """A lab machine's ed25519 host key fingerprint as its console shows it (ssh-keygen -lf):
    what an operator checks before `replace-node --accept-new-host-key`."""
    listed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f",
                             str(node_dir(node) / "ssh" / "ssh_host_ed25519_key.pub")],
                            capture_output=True, text=True, check=True)
    return listed.stdout.split()[1]


def _known_hosts(addresses: dict[str, str]) -> None:
    lines = []
    for node, address in addresses.items():
        key = (node_dir(node) / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"{address},{node} {key[0]} {key[1]}")
    (lab_dir() / "known_hosts").write_text("\n".join(lines) + "\n")


def _lab_secret(name: str) -> str:
    """A random secret made once per lab folder (kept in .lab/, mode 0600): the same across
    `lab up`s, as an operator's Vault value is across applies."""
    path = lab_dir() / "secrets" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.touch(mode=0o600)
        path.write_text(uuid.uuid4().hex + "\n")
    return path.read_text().strip()


def write_lab_inventory(addresses: dict[str, str], gpus_per_node: int) -> Path:
    """Write inventory/lab/: hosts.yml (addresses, SSH settings) and group_vars."""
    directory = lab_inventory_dir()
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    gpu_hosts = {node: {"ansible_host": address} for node, address in addresses.items() if node != CONTROLLER}
    hosts = {
        "all": {
            "vars": {
                "ansible_user": LAB_USER,
                "ansible_become": True,
                "ansible_ssh_private_key_file": str(lab_dir() / "ssh" / "id_ed25519"),
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={lab_dir() / 'known_hosts'} "
                                           "-o StrictHostKeyChecking=yes",
            },
            "children": {
                "controller": {"hosts": {CONTROLLER: {"ansible_host": addresses[CONTROLLER]}}},
                "monitoring": {"hosts": {CONTROLLER: None}},
                "gpu_nodes": {"hosts": gpu_hosts},
            },
        }
    }
    header = "# Written by `provision lab up`; regenerated on every lab up. Do not edit.\n"
    (directory / "hosts.yml").write_text(header + yaml.safe_dump(hosts, sort_keys=False))
    cluster = {
        "cluster_name": "lab",
        "fabric": "infiniband",
        "gpu_driver_version": hw_state.DEFAULT_DRIVER_VERSION,
        "dcgm_version": "1:3.3.9",
        # The lab's own package mirror (stand-in NVIDIA packages; unsigned, hence trusted=yes).
        "gpu_driver_apt_repository": f"deb [trusted=yes] http://{REPO}:{REPO_PORT}/ ./",
        "gpu_driver_apt_key_url": "",
        "firmware_hca_versions": {hw_state.CONNECTX7_PSID: hw_state.DEFAULT_HCA_FIRMWARE},
        # The shared volume stands in for the NFS a cluster keeps Slurm's state, the accounting
        # database's dumps and the monitoring history on: they outlive a rebuilt controller.
        "slurm_state_save_location": f"{SHARED_MOUNT}/slurm/state",
        # The lab network's DNS resolves ctl01 to whichever machine holds the name, as a site's
        # DNS does: jobs running while the controller is rebuilt find the new one.
        "slurm_controller_by_name": True,
        "slurm_accounting_backup_dir": f"{SHARED_MOUNT}/slurm/accounting-backup",
        "slurm_accounting_db_password": _lab_secret("accounting-db-password"),
        # Prometheus, Alertmanager and node_exporter answer HTTPS requests with it only.
        "monitoring_web_password": _lab_secret("monitoring-web-password"),
        "slurm_accounting_mariadb_version": "1:10.11.18-0+deb12u1",
        "monitoring_prometheus_storage_path": f"{SHARED_MOUNT}/monitoring/prometheus",
        "monitoring_alertmanager_storage_path": f"{SHARED_MOUNT}/monitoring/alertmanager",
        "slurm_partitions": [
            {"name": "gpu", "nodes": "ALL", "default": True},
            {"name": "debug", "nodes": "ALL", "max_time": "0:30:00"},
        ],
        "nccl_env": {"NCCL_IB_TIMEOUT": 22, "NCCL_IB_RETRY_CNT": 7},
        # Debian 12's Slurm, pinned as production pins it.
        "slurm_version": "22.05.8-4+deb12u3",
        # The stand-in dcgm-exporter paired with DCGM 3.3.9.
        "dcgm_exporter_version": "3.3.9-3.6.1-1",
        # Fast enough for tests to see an alert within a minute.
        "monitoring_scrape_interval": "5s",
        "monitoring_evaluation_interval": "5s",
        "monitoring_alert_group_wait": "5s",
        # Grafana's package repository is out of reach here: dashboards are provisioned as files.
        "monitoring_grafana_install": False,
        # The certification toolkit from the lab repository: a wheelhouse and nccl-tests' (stand-in) source.
        "certification_pip_find_links": f"http://{REPO}:{REPO_PORT}/{certify_files.WHEELHOUSE}/",
        "certification_pip_extra_args": f"--trusted-host {REPO}",
        "certification_nccl_tests_source": f"http://{REPO}:{REPO_PORT}/{certify_files.NCCL_TESTS_TARBALL}",
        "certification_nccl_tests_version": certify_files.nccl_tests_version(),
        "certification_nccl_tests_make_vars": {},
        # The CUDA compiler and NCCL from the lab repository (stand-ins at the real names and
        # versions); OpenMPI and PMIx are Debian's own, as in production.
        "certification_cuda_packages": lab_cuda_packages("12.2"),
        # The lab's GPUs are device files: torch sees none, so the ranks run on gloo.
        "certification_require_cuda": False,
        # CPU-sized certification: two ranks per node on gloo, 16 MiB gradients, the tiny model.
        "certification_procs_per_node": 2,
        "certification_min_bytes": 1048576,
        "certification_gradient_bytes": 16777216,
        "certification_iters": 10,
        "certification_warmup_iters": 2,
        "certification_preset": "tiny",
        "certification_profile": "lab-cpu",
        "certification_srun_mpi": "pmix",
        # Two containers share this machine's few CPUs: timings wander far more than on dedicated
        # GPUs, so the lab allows more spread. A node container built minutes before measured up to
        # 32 % below its partner (and level with it a few minutes later), and with three GPU nodes
        # on two CPUs one node's nccl-tests alone measured 40.7 % below the others'; the slowed
        # node of the tests is more than 50 % below.
        "certification_variance_percent": 45,
        # Four ranks on two CPUs time-slice with everything else the machine runs: an idle lab's
        # 200-step trainings measured CVs of 0.12-0.16, with the step time moving up 50 % for a
        # third of a run and back; a loaded CI machine went over 0.3. Here the bound catches
        # stalls (one stall of a second in 160 steps of 60 ms: CV about 1.1), not jitter.
        "certification_step_time_cv_max": 1.0,
        # replace-node's 200-step training of the tiny model takes the loss down about 46 %
        # (1000 steps: over 70 %).
        "certification_loss_drop_min": 0.4,
        # A lab job starts in seconds: a rank that makes no progress for 40 s is hung (a real
        # cluster's default, 300 s, leaves NCCL's initialisation on 1,000 nodes room).
        "certification_hang_timeout_s": 40,
        "certification_heartbeat_s": 2,
        # Four ranks time-slice two CPUs: a rank's compute time wanders by tens of percent.
        "certification_straggler_percent": 100,
        "certification_poll_interval_s": 2,
    }
    (directory / "group_vars" / "all.yml").write_text(header + yaml.safe_dump(cluster, sort_keys=False))
    gpu_vars = {"gpu_count": gpus_per_node, "gpu_model": "H100-SXM5-80GB", "ib_hca_count": LAB_HCAS,
                # Containers share the host's kernel: RDMA modules cannot be loaded from a node.
                "infiniband_kernel_modules_load": False, "gpu_driver_peermem_load": False,
                # A container shares the host's kernel and its boot id; PID 1's start time (in
                # clock ticks since the host booted) changes with every restart of the container.
                "upgrade_boot_time_command": "cut -d' ' -f22 /proc/1/stat",
                # shutdown -r asks logind, which lab nodes do not run; systemd itself reboots.
                "upgrade_reboot_command": "systemctl start --job-mode=replace-irreversibly --no-block reboot.target",
                "upgrade_reboot_timeout_s": 300}
    # The simulated HCAs' sysfs view (rendered from the node's hardware state), read by
    # node_exporter's infiniband collector as it reads /sys on a real node.
    gpu_vars["monitoring_node_exporter_sysfs"] = f"{hw_state.NODE_STATE_MOUNT}/{hw_state.SYSFS_DIR_NAME}"
    if host_lacks_sys_resource():
        # No process on this host can raise a hard limit (CAP_SYS_RESOURCE is missing from
        # the bounding set), so no lab node can: the memlock limit is written, not checked.
        gpu_vars["infiniband_memlock_verify"] = False
    (directory / "group_vars" / "gpu_nodes.yml").write_text(header + yaml.safe_dump(gpu_vars, sort_keys=False))
    return directory


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
    _ssh_keygen(directory / "ssh" / "id_ed25519", "lab operator key")
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
    _known_hosts(addresses)
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


def status_as_dicts(statuses: list[NodeStatus]) -> list[dict]:
    return [asdict(status) for status in statuses]


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
