"""The inventory's model: its groups, the variables the CLI reads (validated with pydantic),
and the loaded Inventory."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from provisioner.errors import InputProblem

REQUIRED_GROUPS = ("controller", "gpu_nodes", "monitoring")
OPTIONAL_GROUPS = ("login", "subnet_managers")
KNOWN_GROUPS = REQUIRED_GROUPS + OPTIONAL_GROUPS
GROUP_KEYS = {"hosts", "vars", "children"}

# An exact version pin: dotted numbers, optional epoch and Debian revision/suffix.
# "535.161.08", "22.05.8-4+deb12u3", "1:2.3.0-1", "28.39.1002". Not "535", "latest", "535.x".
# Patterns are matched against whole strings (fullmatch: `$` alone lets a trailing newline pass).
VERSION_PATTERN = re.compile(r"(\d+:)?\d+(\.\d+)+([-+~][0-9A-Za-z.+~-]*)?")
SLURM_TIME_PATTERN = re.compile(r"INFINITE|UNLIMITED|(\d+-)?\d+(:\d{2}){0,2}")
# A host name as DNS, Slurm and the kernel take it: dot-separated labels of at most 63
# characters (underscores tolerated, as in inventories), no empty label, 63 in all
# (HOST_NAME_MAX is 64 with its terminating NUL).
HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?")
HOST_NAME_MAX = 63
DATABASE_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
INFINIBAND_RATES = (100, 200, 400, 800)


@dataclass(frozen=True)
class Defined:
    """A variable's value and where it was defined."""

    value: Any
    file: str
    key: str


class GpuNodeVars(BaseModel):
    """Variables every host in `gpu_nodes` must carry (after group/host merging)."""

    model_config = ConfigDict(extra="ignore")

    gpu_count: int = Field(strict=True, ge=1, le=64)
    gpu_model: str = Field(min_length=1)
    ib_hca_count: int = Field(default=0, strict=True, ge=0, le=64)
    # provision upgrade: how long a node may take to come back from its reboot, and the command
    # whose output changes with every boot (the kernel's boot id on a machine).
    upgrade_reboot_timeout_s: int = Field(default=1800, strict=True, ge=60)
    upgrade_boot_time_command: str = Field(default="cat /proc/sys/kernel/random/boot_id", min_length=1)
    # The command that reboots a node ("": the reboot module's own, shutdown -r).
    upgrade_reboot_command: str = ""


class Partition(BaseModel):
    """One Slurm partition as declared in `slurm_partitions`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    nodes: list[str] | Literal["ALL"] = "ALL"
    default: bool = False
    max_time: str = "INFINITE"

    @field_validator("max_time")
    @classmethod
    def _slurm_time(cls, value: str) -> str:
        if not SLURM_TIME_PATTERN.fullmatch(value):
            raise ValueError("not a Slurm time limit (e.g. INFINITE, 30, 1:00:00 or 2-00:00:00)")
        return value


class BusbwThresholds(BaseModel):
    """Inventory overrides of the hardware profile's busbw thresholds (GB/s)."""

    model_config = ConfigDict(extra="forbid")

    intra_node: float | None = Field(default=None, gt=0)
    inter_node: float | None = Field(default=None, gt=0)


NFS_SOURCE = re.compile(r"[^:/\s]+:/\S*")
LUSTRE_SOURCE = re.compile(r"\S+@\S+:/\S+")
ABSOLUTE_PATH = re.compile(r"/\S*")


class Filesystem(BaseModel):
    """One entry of `storage_filesystems`: a filesystem every GPU and login node mounts at `path`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    type: Literal["nfs", "lustre", "bind"]
    source: str = Field(min_length=1)
    path: str
    options: str = ""
    purpose: Literal["checkpoints", "datasets"] = "checkpoints"

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not ABSOLUTE_PATH.fullmatch(value) or value == "/" or "/../" in f"{value}/":
            raise ValueError("the mount point must be an absolute path other than / (e.g. /checkpoints)")
        return value

    def source_problem(self) -> str | None:
        """What is wrong with the source for the type, or None."""
        if self.type == "nfs" and not NFS_SOURCE.fullmatch(self.source):
            return f"an NFS export is server:/path (got {self.source!r})"
        if self.type == "lustre" and not LUSTRE_SOURCE.fullmatch(self.source):
            return f"a Lustre source is mgsnode@net:/fsname, e.g. 10.0.0.1@o2ib:/scratch (got {self.source!r})"
        if self.type == "bind" and not ABSOLUTE_PATH.fullmatch(self.source):
            return f"a bind source is an absolute directory (got {self.source!r})"
        return None


class ClusterVars(BaseModel):
    """Cluster-wide variables (the `all` group)."""

    model_config = ConfigDict(extra="allow")

    cluster_name: str = Field(default="cluster", pattern=r"^[a-z][a-z0-9_-]*$")
    fabric: Literal["infiniband", "roce", "ethernet"] = "infiniband"
    slurm_partitions: list[Partition] = Field(default_factory=list)
    nccl_env: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    # provision certify: criteria and the smoke training (see provisioner.certify).
    certification_profile: str | None = None
    certification_busbw_thresholds_gbps: BusbwThresholds | None = None
    certification_variance_percent: float = Field(default=5.0, gt=0, lt=100)
    certification_step_time_cv_max: float = Field(default=0.05, gt=0)
    # None: the smoke-training preset's own figure for the run's steps.
    certification_loss_drop_min: float | None = Field(default=None, gt=0, lt=1)
    # DistributedDataParallel's bucket (MiB): the trainer's all-reduce size, and the message size
    # whose busbw is judged beside the gradient size's, at this share of its threshold.
    certification_ddp_bucket_mb: float = Field(default=100.0, gt=0, le=4096)
    certification_bucket_floor_share: float = Field(default=0.6, gt=0, le=1)
    certification_preset: Literal["tiny", "small", "1b"] = "1b"
    certification_steps: int = Field(default=1000, strict=True, ge=1)
    certification_warmup_steps: int = Field(default=50, strict=True, ge=0)
    certification_gradient_bytes: int = Field(default=8589934592, strict=True, ge=1)
    certification_partition: str | None = None
    certification_job_time_limit: str = "0:30:00"
    # A job whose ranks make no progress for this long is ended and the ranks that stopped
    # first are named (NCCL initialisation on 1,000 nodes takes tens of seconds: not tripped).
    certification_hang_timeout_s: float = Field(default=300.0, ge=10, le=86400)
    # How often each torch rank reports its position (at most a third of the hang timeout).
    certification_heartbeat_s: float = Field(default=10.0, ge=0.5, le=600)
    # A rank whose median compute time per step is more than this share above the fleet's.
    certification_straggler_percent: float = Field(default=10.0, gt=0, le=1000)
    # srun jobs at once on the controller (a round with more waits for places).
    certification_max_concurrent_jobs: int = Field(default=1024, strict=True, ge=1, le=100000)
    # How often the CLI reads the driver's progress.
    certification_poll_interval_s: float = Field(default=5.0, ge=0.5, le=60)
    # The checkpoint the storage part writes and the storage phase makes room for: a plan preset
    # (70B) or a parameter count (20M), in mixed precision with Adam (14 bytes per parameter).
    certification_checkpoint_model: str = "70B"
    # A save (and a load) of it on every node at once may take this long: 5 % of an hour between
    # checkpoints (docs/certify.md).
    certification_checkpoint_save_max_s: float = Field(default=180.0, gt=0)
    certification_checkpoint_load_max_s: float = Field(default=180.0, gt=0)
    # provision apply's storage phase (roles/storage).
    storage_filesystems: list[Filesystem] = Field(default_factory=list)
    storage_checkpoint_keep: int = Field(default=2, strict=True, ge=1, le=1000)

    @field_validator("certification_checkpoint_model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from provisioner.plan.models import PRESETS, model_parameters

        try:
            model_parameters(value)
        except ValueError:
            raise ValueError(f"neither a preset ({', '.join(PRESETS)}) nor a parameter count (e.g. 20M, "
                             "6.7e9)") from None
        return value

    @property
    def checkpoint_filesystem(self) -> Filesystem | None:
        return next((fs for fs in self.storage_filesystems if fs.purpose == "checkpoints"), None)


@dataclass
class Inventory:
    """A validated inventory."""

    name: str
    directory: Path
    hosts_file: Path
    groups: dict[str, list[str]]
    hostvars: dict[str, dict[str, Any]]
    cluster: ClusterVars
    gpu_nodes: dict[str, GpuNodeVars] = field(default_factory=dict)
    # Accepted but worth saying: plain-text secrets.
    warnings: list[InputProblem] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        seen: dict[str, None] = {}
        for members in self.groups.values():
            seen.update(dict.fromkeys(members))
        return list(seen)

    def group(self, name: str) -> list[str]:
        return list(self.groups.get(name, []))

    def node_kinds(self, nodes: list[str]) -> dict[str, set]:
        """The distinct hardware of these GPU nodes: gpu_model, gpu_count, ib_hca_count and port rate
        (infiniband_port_rate, 400 Gb/s unless set, as the infiniband role assumes)."""
        return {
            "gpu_model": {self.gpu_nodes[node].gpu_model for node in nodes},
            "gpu_count": {self.gpu_nodes[node].gpu_count for node in nodes},
            "ib_hca_count": {self.gpu_nodes[node].ib_hca_count for node in nodes},
            "port_rate": {int(self.hostvars[node].get("infiniband_port_rate", 400)) for node in nodes},
        }
