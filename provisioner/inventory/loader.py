"""Inventory loading and validation.

An inventory is a directory `inventory/<name>/` holding `hosts.yml` (Ansible's YAML
inventory format) plus optional `group_vars/` and `host_vars/`. Validation collects every
problem it finds, each naming the file, the key path and what is wrong; nothing touches
a host before the inventory validates.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from provisioner.ansible.redact import SECRET_KEYS_WITHIN, SECRET_NAME
from provisioner.ansible.vault import is_vault_file
from provisioner.errors import InputError, InputProblem
from provisioner.facts.cuda_compat import torch_driver_problem
from provisioner.facts.monitoring import receiver_problems
from provisioner.facts.munge import munge_key_problem
from provisioner.facts.nccl_profiles import load_profiles
from provisioner.facts.nccl_variables import variable_problem
from provisioner.inventory.yaml_source import EncryptedFile, VaultValue, load_yaml
from provisioner.paths import INVENTORIES_DIR, role_defaults

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


def resolve_inventory_dir(name_or_path: str) -> Path:
    """`prod` means `inventory/prod/` of the project; an existing path is taken as it is."""
    candidate = Path(name_or_path)
    project_dir = INVENTORIES_DIR / name_or_path
    try:
        if candidate.is_file():
            return candidate.parent
        if candidate.is_dir():
            return candidate
        if project_dir.is_dir():
            return project_dir
    except OSError as error:
        raise InputError([InputProblem(name_or_path, "", f"cannot read: {error.strerror}")]) from None
    raise InputError(
        [InputProblem(name_or_path, "", f"no such inventory (looked for {name_or_path} and {project_dir})")]
    )


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):  # elsewhere, or a symbolic link loop
        return str(path)


def _key(prefix: str, name: Any) -> str:
    return f"{prefix}.{name}" if prefix else str(name)


@dataclass
class _Reader:
    """Walks the YAML inventory, recording groups, hosts and every variable's origin."""

    hosts_display: str
    problems: list[InputProblem] = field(default_factory=list)
    parents: dict[str, str | None] = field(default_factory=dict)
    direct_hosts: dict[str, list[str]] = field(default_factory=dict)
    host_keys: dict[str, str] = field(default_factory=dict)
    group_vars: dict[str, dict[str, Defined]] = field(default_factory=dict)
    host_vars: dict[str, dict[str, Defined]] = field(default_factory=dict)

    warnings: list[InputProblem] = field(default_factory=list)
    # Variable files encrypted whole with Ansible Vault (read with the vault password).
    vaulted_files: set[str] = field(default_factory=set)

    def problem(self, key: str, message: str, file: str | None = None) -> None:
        self.problems.append(InputProblem(file or self.hosts_display, key, message))

    def read_root(self, document: Any) -> None:
        if not isinstance(document, dict) or set(document) != {"all"}:
            found = sorted(document) if isinstance(document, dict) else type(document).__name__
            self.problem("", f"the top level must be the single key 'all' (found {found})")
            return
        self.read_group("all", document["all"], "all", parent=None)

    def read_group(self, name: str, body: Any, key: str, parent: str | None) -> None:
        if name in self.parents:
            self.problem(key, f"group {name!r} is defined twice (first under {self.parents[name]!r})")
            return
        self.parents[name] = parent
        self.direct_hosts.setdefault(name, [])
        if body is None:
            return
        if not isinstance(body, dict):
            self.problem(key, "a group must be a mapping of hosts, vars and children")
            return
        for unknown in sorted(set(body) - GROUP_KEYS):
            self.problem(_key(key, unknown), "unknown key in a group (expected hosts, vars or children)")
        self._read_hosts(name, body.get("hosts"), _key(key, "hosts"))
        self._read_vars(self.group_vars.setdefault(name, {}), body.get("vars"), _key(key, "vars"),
                        self.hosts_display)
        children = body.get("children") or {}
        if not isinstance(children, dict):
            self.problem(_key(key, "children"), "children must be a mapping of group names")
            return
        for child, child_body in children.items():
            child_key = _key(_key(key, "children"), child)
            self._check_group_name(name, str(child), child_key)
            self.read_group(str(child), child_body, child_key, parent=name)

    def _check_group_name(self, parent: str, child: str, key: str) -> None:
        if parent == "all" and child not in KNOWN_GROUPS:
            self.problem(key, f"unknown group {child!r}{_suggest(child, KNOWN_GROUPS)}; top-level groups are "
                         f"{', '.join(KNOWN_GROUPS)} (sub-groups of GPU nodes go under gpu_nodes.children)")
        elif parent != "all" and child in KNOWN_GROUPS:
            self.problem(key, f"group {child!r} must sit directly under all.children")

    def _read_hosts(self, group: str, hosts: Any, key: str) -> None:
        if hosts is None:
            return
        if not isinstance(hosts, dict):
            self.problem(key, "hosts must be a mapping of host names to their variables")
            return
        for host, variables in hosts.items():
            host = str(host)
            host_key = _key(key, host)
            problem = host_name_problem(host)
            if problem:
                self.problem(host_key, problem)
            self.direct_hosts[group].append(host)
            self.host_keys.setdefault(host, host_key)
            self._read_vars(self.host_vars.setdefault(host, {}), variables, host_key, self.hosts_display)

    def _read_vars(self, target: dict[str, Defined], variables: Any, key: str, file: str) -> None:
        if variables is None:
            return
        if not isinstance(variables, dict):
            self.problem(key, "variables must be a mapping", file)
            return
        for name, value in variables.items():
            if not isinstance(name, str) or not VARIABLE_NAME.fullmatch(name):
                self.problem(_key(key, name), f"{str(name)[:80]!r} is not a variable name (letters, digits and "
                             "underscores, not starting with a digit)", file)
                continue
            target[name] = Defined(value, file, _key(key, name))


def host_name_problem(host: str) -> str | None:
    """Why `host` is not a valid host name, or None."""
    shown = repr(host[:80] + ("..." if len(host) > 80 else ""))
    if len(host) > HOST_NAME_MAX:
        return f"{shown} is not a valid host name: longer than {HOST_NAME_MAX} characters"
    if not all(HOST_LABEL.fullmatch(label) for label in host.split(".")):
        return (f"{shown} is not a valid host name: dot-separated labels of letters, digits, '-' and '_', "
                "each starting and ending with a letter or digit, none empty")
    return None


def _suggest(word: str, choices: tuple[str, ...] | list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _read_var_files(directory: Path, known: set[str], kind: str, reader: _Reader) -> dict[str, dict[str, Defined]]:
    """Read group_vars/ or host_vars/: `<name>.yml` files or `<name>/` folders of YAML files."""
    found: dict[str, dict[str, Defined]] = {}
    try:
        if not directory.is_dir():
            return found
    except OSError as error:
        reader.problem("", f"cannot read: {error.strerror}", _display(directory))
        return found
    root = directory.parent.resolve()
    try:
        entries = sorted(directory.iterdir())
    except OSError as error:
        reader.problem("", f"cannot read: {error.strerror or error}", _display(directory))
        return found
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if not entry.resolve(strict=True).is_relative_to(root):
                reader.problem("", f"links to {entry.resolve()}, outside the inventory: keep every variable file "
                               "inside the inventory folder", _display(entry))
                continue
            files = sorted(p for p in entry.iterdir() if p.suffix in (".yml", ".yaml")) if entry.is_dir() \
                else [entry]
        except (OSError, RuntimeError) as error:
            reason = getattr(error, "strerror", None) or "a symbolic link loop"
            reader.problem("", f"cannot read: {reason}", _display(entry))
            continue
        name = entry.name if entry.is_dir() else entry.stem
        if not entry.is_dir() and entry.suffix not in (".yml", ".yaml"):
            continue
        if name not in known:
            reader.problem("", f"no {kind} named {name!r} in hosts.yml{_suggest(name, sorted(known))}",
                           _display(entry))
            continue
        for path in files:
            display = _display(path)
            if not path.resolve().is_relative_to(root):
                reader.problem("", f"links to {path.resolve()}, outside the inventory: keep every variable file "
                               "inside the inventory folder", display)
                continue
            try:
                document = load_yaml(path, display)
            except InputError as error:
                reader.problems.extend(error.problems)
                continue
            if isinstance(document, EncryptedFile):
                # Ansible decrypts it at run time; without the vault password its variable
                # names are unknown here (a check that needs one of them says so).
                continue
            if is_vault_file(path):
                reader.vaulted_files.add(display)
            reader._read_vars(found.setdefault(name, {}), document, "", display)
    return found


def _lineage(group: str, parents: dict[str, str | None]) -> list[str]:
    chain: list[str] = []
    current: str | None = group
    while current is not None:
        chain.append(current)
        current = parents.get(current)
    return list(reversed(chain))


def _members(reader: _Reader) -> dict[str, list[str]]:
    """Every group's hosts, including those of its descendant groups (in inventory order)."""
    members: dict[str, dict[str, None]] = {name: {} for name in reader.parents}
    for group, hosts in reader.direct_hosts.items():
        for ancestor in _lineage(group, reader.parents):
            members[ancestor].update(dict.fromkeys(hosts))
    return {name: list(hosts) for name, hosts in members.items()}


def _merged_host_vars(host: str, reader: _Reader, file_groups: dict, file_hosts: dict) -> dict[str, Defined]:
    """Ansible's precedence, simplified: all < parent groups < child groups < the host."""
    groups = [g for g, hosts in reader.direct_hosts.items() if host in hosts]
    ordered: list[str] = []
    for group in groups:
        for name in _lineage(group, reader.parents):
            if name not in ordered:
                ordered.append(name)
    ordered.sort(key=lambda name: len(_lineage(name, reader.parents)))
    merged: dict[str, Defined] = {}
    for name in ordered:
        merged.update(reader.group_vars.get(name, {}))
        merged.update(file_groups.get(name, {}))
    merged.update(reader.host_vars.get(host, {}))
    merged.update(file_hosts.get(host, {}))
    return merged


def _check_definitions(sites: list[dict[str, Defined]], reader: _Reader) -> None:
    """Checks that apply wherever a variable is defined: version pins and NCCL settings."""
    for variables in sites:
        for name, defined in variables.items():
            _check_secret_in_clear(name, defined, reader)
            if name.endswith("_port") or name == "ansible_port":
                _check_port(defined, reader)
            if name == "infiniband_port_rate" and (isinstance(defined.value, bool) or
                                                   defined.value not in INFINIBAND_RATES):
                reader.problem(defined.key, f"must be a port rate in Gb/s, one of "
                               f"{', '.join(map(str, INFINIBAND_RATES))} (got {_shown(defined.value)})", defined.file)
            if name == "slurm_accounting_db_name" and not (isinstance(defined.value, str) and
                                                          DATABASE_NAME.fullmatch(defined.value)):
                reader.problem(defined.key, f"{_shown(defined.value)} is not a database name: letters, digits and "
                               "underscores, at most 64", defined.file)
            if name.endswith("_version"):
                _check_version(defined, reader)
            if name == "nccl_env":
                _check_nccl_env(defined, reader)
            if name == "nccl_opt_in":
                _check_nccl_opt_in(defined, variables, reader)
            if name == "monitoring_alert_receivers":
                _check_alert_receivers(defined, reader)
            if name == "slurm_munge_key":
                _check_munge_key(defined, reader)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_port(defined: Defined, reader: _Reader) -> None:
    value = defined.value
    if isinstance(value, str) and "{{" in value:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        reader.problem(defined.key, f"must be a port number from 1 to 65535 (got {_shown(value)})", defined.file)


def _is_secret_in_clear(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool) and value != "" and "{{" not in str(value)


def _check_secret_in_clear(name: str, defined: Defined, reader: _Reader) -> None:
    """A secret written in the clear is accepted, with a warning naming it (the run records
    never show it either way)."""
    advice = "keep it in Ansible Vault (ansible-vault encrypt_string, or an encrypted vault.yml)"
    if defined.file in reader.vaulted_files:
        return
    if SECRET_NAME.search(name) and _is_secret_in_clear(defined.value):
        reader.warnings.append(InputProblem(defined.file, defined.key, f"a secret in plain text: {advice}"))
    within = SECRET_KEYS_WITHIN.get(name)
    if within and isinstance(defined.value, list):
        for index, item in enumerate(defined.value):
            for key in sorted(within & set(item) if isinstance(item, dict) else ()):
                if _is_secret_in_clear(item[key]):
                    reader.warnings.append(InputProblem(defined.file, f"{defined.key}[{index}].{key}",
                                                        f"a secret in plain text: {advice}"))


def _check_accounting(merged: dict[str, dict[str, Defined]], controllers: list[str], reader: _Reader) -> None:
    """Job accounting (on unless slurm_accounting: false) needs the database password where
    the primary controller reads it; the value itself is never echoed."""
    if not controllers or controllers[0] not in merged:
        return
    variables = merged[controllers[0]]
    enabled = variables.get("slurm_accounting")
    if enabled is not None and not isinstance(enabled.value, bool):
        reader.problem(enabled.key, f"must be true or false (got {type(enabled.value).__name__})", enabled.file)
        return
    if enabled is not None and enabled.value is False:
        return
    _require_secret(variables, "slurm_accounting_db_password",
                    f"job accounting is on (slurm_accounting) but the controller {controllers[0]} has no database "
                    "password: set slurm_accounting_db_password (kept in Ansible Vault) in group_vars/all.yml or "
                    "group_vars/controller.yml, or set slurm_accounting: false", reader)


def _require_secret(variables: dict[str, Defined], name: str, missing: str, reader: _Reader) -> None:
    """A secret the inventory must give, as a string (its value never echoed); `missing` says
    why it is needed and where to set it."""
    defined = variables.get(name)
    if defined is None or defined.value in ("", None):
        reader.problem(name, missing, str(Path(reader.hosts_display).parent / "group_vars" / "all.yml"))
    elif not isinstance(defined.value, str | VaultValue):
        reader.problem(defined.key, "must be a string (quote it, or keep it in Ansible Vault)", defined.file)


def _check_monitoring_secrets(merged: dict[str, dict[str, Defined]], servers: list[str], reader: _Reader) -> None:
    """The monitoring endpoints' password is given, and where Grafana is installed
    (monitoring_grafana_install, on unless false) its admin password: Grafana's own default is
    admin/admin."""
    for server in servers:
        variables = merged.get(server, {})
        _require_secret(variables, "monitoring_web_password",
                        "Prometheus, Alertmanager and node_exporter answer only HTTPS requests with a password, and "
                        "none is given: set monitoring_web_password (kept in Ansible Vault)", reader)
        install = variables.get("monitoring_grafana_install")
        if install is not None and install.value is False:
            continue
        _require_secret(variables, "monitoring_grafana_admin_password",
                        f"Grafana is installed on {server} (monitoring_grafana_install) but has no admin password, "
                        "so it would keep admin/admin: set monitoring_grafana_admin_password (kept in Ansible "
                        "Vault), or set monitoring_grafana_install: false", reader)


def _check_munge_key(defined: Defined, reader: _Reader) -> None:
    """A key in the clear is checked; a vaulted or templated one only Ansible can read (its
    value is never echoed)."""
    if isinstance(defined.value, VaultValue) or defined.value in ("", None) or "{{" in str(defined.value):
        return
    problem = munge_key_problem(defined.value)
    if problem:
        reader.problem(defined.key, problem, defined.file)


def _check_nccl_env(defined: Defined, reader: _Reader) -> None:
    if not isinstance(defined.value, dict):
        reader.problem(defined.key, "nccl_env must be a mapping of NCCL variable names to values", defined.file)
        return
    for variable, value in defined.value.items():
        problem = variable_problem(variable, value)
        if problem:
            reader.problem(_key(defined.key, variable), problem, defined.file)


def _check_nccl_opt_in(defined: Defined, variables: dict[str, Defined], reader: _Reader) -> None:
    """Opt-in settings must exist in the profile of the fabric (see roles/nccl/vars/main.yml)."""
    profiles = load_profiles()
    fabric = variables["fabric"].value if "fabric" in variables else None
    options = sorted({option for name, profile in profiles.items() if fabric in (None, name)
                      for option in profile.get("options", {})})
    if not isinstance(defined.value, list) or not all(isinstance(item, str) for item in defined.value):
        reader.problem(defined.key, "nccl_opt_in must be a list of option names", defined.file)
        return
    for position, option in enumerate(defined.value):
        if option not in options:
            where = f"the {fabric} profile" if fabric else "any NCCL profile"
            reader.problem(f"{defined.key}[{position}]", f"{option!r} is not an opt-in setting of {where}"
                           f"{_suggest(option, options)}; available: {', '.join(options) or 'none'}", defined.file)


# Alert receiver types and the keys each needs (values are not echoed: URLs carry tokens).


def _check_alert_receivers(defined: Defined, reader: _Reader) -> None:
    for key, message in receiver_problems(defined.value, (str, VaultValue)):
        reader.problem(defined.key + key, message, defined.file)


def _check_version(defined: Defined, reader: _Reader) -> None:
    value = defined.value
    if isinstance(value, bool) or not isinstance(value, str):
        reader.problem(defined.key, f"a version pin must be a quoted string (YAML read {value!r} as "
                       f"{type(value).__name__}: quote it, e.g. \"{value}\")", defined.file)
    elif not VERSION_PATTERN.fullmatch(value):
        reader.problem(defined.key, f"{value!r} is not an exact version (expected e.g. \"535.161.08\" "
                       "or \"22.05.8-4+deb12u3\")", defined.file)


def _pydantic_problems(error: ValidationError, variables: dict[str, Defined], missing_at: tuple[str, str],
                       hint: str) -> list[InputProblem]:
    problems = []
    for item in error.errors():
        location = item["loc"]
        top = str(location[0]) if location else ""
        rest = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location[1:])
        if top in variables:
            defined = variables[top]
            problems.append(InputProblem(defined.file, defined.key + rest, _pydantic_message(item)))
        else:
            file, key = missing_at
            problems.append(InputProblem(file, _key(key, top) + rest, f"missing: {hint}"))
    return problems


def _pydantic_message(item: dict) -> str:
    message = item["msg"]
    if item["type"] == "literal_error":
        message = f"{item['input']!r} is not allowed: {message.lower()}"
    elif "input" in item and not isinstance(item["input"], dict | list):
        message = f"{message} (got {_shown(item['input'])})"
    return message


def _check_partitions(cluster: ClusterVars, variables: dict[str, Defined], members: dict[str, list[str]],
                      reader: _Reader) -> None:
    gpu_nodes = set(members.get("gpu_nodes", []))
    gpu_groups = {g for g in members if g == "gpu_nodes" or "gpu_nodes" in _lineage(g, reader.parents)}
    defined = variables.get("slurm_partitions")
    if defined is None:
        return
    names: set[str] = set()
    defaults = []
    for index, partition in enumerate(cluster.slurm_partitions):
        key = f"{defined.key}[{index}]"
        if partition.name in names:
            reader.problem(f"{key}.name", f"partition {partition.name!r} is declared twice", defined.file)
        names.add(partition.name)
        if partition.default:
            defaults.append(partition.name)
        if partition.nodes == "ALL":
            continue
        if not partition.nodes:
            reader.problem(f"{key}.nodes", f"partition {partition.name!r} has no nodes: name GPU nodes or groups "
                           "under gpu_nodes, or ALL", defined.file)
        elif all(node in gpu_groups and not members.get(node) for node in partition.nodes):
            reader.problem(f"{key}.nodes", f"partition {partition.name!r} has no nodes: its groups "
                           f"{', '.join(partition.nodes)} have no hosts", defined.file)
        for position, node in enumerate(partition.nodes):
            if node not in gpu_nodes and node not in gpu_groups:
                reader.problem(f"{key}.nodes[{position}]",
                               f"partition {partition.name!r} names unknown node {node!r}"
                               f"{_suggest(node, sorted(gpu_nodes | gpu_groups))}; "
                               "partitions take GPU node names or groups under gpu_nodes", defined.file)
    if len(defaults) > 1:
        reader.problem(defined.key, f"more than one default partition: {', '.join(defaults)}", defined.file)


def _check_structure(reader: _Reader, members: dict[str, list[str]]) -> None:
    for group in REQUIRED_GROUPS:
        if group not in reader.parents:
            reader.problem(f"all.children.{group}", f"missing group {group!r} (required groups: "
                           f"{', '.join(REQUIRED_GROUPS)})")
        elif not members[group]:
            reader.problem(f"all.children.{group}", f"group {group!r} has no hosts")
    if members.get("subnet_managers"):
        reader.problem("all.children.subnet_managers",
                       "running opensm on hosts is not supported: run the subnet manager on the switches "
                       "(the infiniband role checks that every port sees one); remove the group's hosts")
    if len(members.get("controller", [])) > 2:
        reader.problem("all.children.controller",
                       "at most two Slurm controllers (a primary and a backup sharing the state location), "
                       f"found {', '.join(members['controller'])}")
    if len(members.get("monitoring", [])) > 1:
        reader.problem("all.children.monitoring",
                       f"exactly one monitoring host (Prometheus, Alertmanager, Grafana), found "
                       f"{', '.join(members['monitoring'])}")
    grouped = {host for group, hosts in members.items() if group != "all" for host in hosts}
    for host in reader.direct_hosts.get("all", []):
        if host not in grouped:
            reader.problem(reader.host_keys[host], f"host {host!r} is in no group: put it under one of "
                           f"{', '.join(KNOWN_GROUPS)}")
    by_lower: dict[str, str] = {}
    for host in reader.host_keys:
        other = by_lower.setdefault(host.lower(), host)
        if other != host:
            reader.problem(reader.host_keys[host], f"duplicate host: {host!r} and {other!r} differ only in case "
                           "(host names are case-insensitive in DNS and Slurm)")


def _address(value: Any) -> tuple[str | None, str]:
    """(the address in one canonical form, or None; why it is refused, or "")."""
    if not isinstance(value, str) or not value.strip():
        return None, f"must be an IP address or a host name (got {_shown(value)})"
    if "{{" in value:
        return value, ""
    text = value.strip()
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        parts = text.split(".")
        if len(parts) == 4 and all(part.isdigit() for part in parts):
            if all(int(part) <= 255 for part in parts):
                canonical = ".".join(str(int(part)) for part in parts)
                return canonical, (f"{text!r} has leading zeros, which some tools read as octal: write "
                                   f"{canonical}")
            return None, f"{text!r} is not an IPv4 address (a part is above 255)"
        if host_name_problem(text):
            return None, f"{_shown(text)} is neither an IP address nor a host name"
        return text.lower(), ""
    if address.is_unspecified or address.is_multicast:
        return None, f"{text} is not an address a host can be reached at"
    return str(address), ""


def _check_addresses(hostvars: dict[str, dict[str, Defined]], reader: _Reader) -> None:
    by_address: dict[str, str] = {}
    for host, variables in hostvars.items():
        defined = variables.get("ansible_host")
        if defined is None:
            continue
        canonical, problem = _address(defined.value)
        if problem:
            reader.problem(defined.key, problem, defined.file)
        if canonical is None:
            continue
        other = by_address.setdefault(canonical, host)
        if other != host:
            reader.problem(defined.key, f"duplicate host: {host!r} has the same address {defined.value} as "
                           f"{other!r}", defined.file)




def _check_torch_driver(gpu_nodes: list[str], merged: dict[str, dict[str, Defined]], reader: _Reader) -> None:
    """On GPU nodes that must run the certification on their GPUs, the pinned torch's CUDA
    build runs under the pinned driver; each distinct problem is reported once."""
    defaults = role_defaults("certification")
    reported: set[tuple[str, str, str]] = set()
    for host in gpu_nodes:
        variables = {name: defined.value for name, defined in merged[host].items()}
        require = variables.get("certification_require_cuda", True)
        driver = variables.get("certification_driver_version") or variables.get("gpu_driver_version", "")
        settings = [variables.get(name, defaults.get(name, "")) for name in
                    ("certification_pip_packages", "certification_pip_extra_index_url", "certification_torch_cuda")]
        if require is False or any("{{" in str(setting) for setting in [*settings, driver]) or \
                not isinstance(settings[0], list):
            continue
        pins, index, stated = settings
        problem = torch_driver_problem([str(pin) for pin in pins], str(driver or ""), str(index or ""),
                                       str(stated or ""))
        if problem is None:
            continue
        where = next((merged[host][name] for name in ("certification_torch_cuda", "certification_pip_packages",
                                                       "certification_driver_version", "gpu_driver_version")
                      if name in merged[host]), None)
        file, key = (where.file, where.key) if where else (reader.hosts_display, "certification_pip_packages")
        if (file, key, problem) not in reported:
            reported.add((file, key, problem))
            reader.problem(key, problem, file)


def load_inventory(name_or_path: str) -> Inventory:
    """Load and validate an inventory; raise InputError listing every problem found."""
    directory = resolve_inventory_dir(name_or_path)
    try:
        hosts_file = next((directory / n for n in ("hosts.yml", "hosts.yaml") if (directory / n).is_file()), None)
    except OSError as error:
        raise InputError([InputProblem(_display(directory), "", f"cannot read: {error.strerror}")]) from None
    if hosts_file is None:
        raise InputError([InputProblem(_display(directory), "", "no hosts.yml in this inventory directory")])
    reader = _Reader(hosts_display=_display(hosts_file))
    document = load_yaml(hosts_file, reader.hosts_display)
    if isinstance(document, EncryptedFile):
        raise InputError([InputProblem(reader.hosts_display, "", "is encrypted with Ansible Vault: keep hosts.yml "
                                       "in the clear and the secrets in group_vars")])
    reader.read_root(document)
    if reader.problems:
        raise InputError(reader.problems)

    members = _members(reader)
    file_groups = _read_var_files(directory / "group_vars", set(reader.parents), "group", reader)
    file_hosts = _read_var_files(directory / "host_vars", set(reader.host_keys), "host", reader)
    _check_structure(reader, members)
    _check_definitions([*reader.group_vars.values(), *reader.host_vars.values(), *file_groups.values(),
                        *file_hosts.values()], reader)

    merged = {host: _merged_host_vars(host, reader, file_groups, file_hosts) for host in reader.host_keys}
    _check_addresses(merged, reader)
    _check_accounting(merged, members.get("controller", []), reader)
    _check_monitoring_secrets(merged, members.get("monitoring", []), reader)

    cluster_defined = {**reader.group_vars.get("all", {}), **file_groups.get("all", {})}
    cluster = ClusterVars()
    try:
        cluster = ClusterVars.model_validate({k: d.value for k, d in cluster_defined.items()})
    except ValidationError as error:
        reader.problems.extend(_pydantic_problems(error, cluster_defined, (reader.hosts_display, "all.vars"), ""))
    else:
        _check_partitions(cluster, cluster_defined, members, reader)

    gpu_nodes: dict[str, GpuNodeVars] = {}
    for host in members.get("gpu_nodes", []):
        variables = merged[host]
        try:
            gpu_nodes[host] = GpuNodeVars.model_validate({k: d.value for k, d in variables.items()})
        except ValidationError as error:
            hint = (f"every GPU node needs gpu_count and gpu_model (on the host, in host_vars/{host}.yml or in "
                    "group_vars/gpu_nodes.yml)")
            reader.problems.extend(
                _pydantic_problems(error, variables, (reader.hosts_display, reader.host_keys[host]), hint))

    if gpu_nodes:
        _check_torch_driver(list(gpu_nodes), merged, reader)
    if reader.problems:
        raise InputError(reader.problems)
    return Inventory(
        name=directory.name,
        directory=directory,
        hosts_file=hosts_file,
        groups={g: hosts for g, hosts in members.items() if g != "all"},
        hostvars={host: {k: d.value for k, d in variables.items()} for host, variables in merged.items()},
        cluster=cluster,
        gpu_nodes=gpu_nodes,
        warnings=_unique(reader.warnings),
    )


def _unique(problems: list[InputProblem]) -> list[InputProblem]:
    return list(dict.fromkeys(problems))
