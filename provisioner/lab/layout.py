"""The lab's names and places: its Docker objects, its machines, their folders."""

from __future__ import annotations

from pathlib import Path

from provisioner.paths import lab_dir

LABEL = "provision.lab"
NETWORK = "provision-lab"
SHARED_VOLUME = "provision-lab-shared"
SHARED_MOUNT = "/shared"
# What the lab keeps on the shared volume for the cluster (its stand-in for NFS).
SHARED_CLUSTER_STATE = (f"{SHARED_MOUNT}/slurm", f"{SHARED_MOUNT}/monitoring")
# The lab's checkpoints filesystem: a directory of the shared volume every node binds at
# CHECKPOINT_MOUNT (this kernel has no NFS client: the shared volume stands in for the site's
# filesystem).
SHARED_CHECKPOINTS = f"{SHARED_MOUNT}/checkpoints"
CHECKPOINT_MOUNT = "/checkpoints"
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
