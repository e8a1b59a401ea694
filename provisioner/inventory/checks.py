"""The inventory's checks beyond its shape: addresses, ports, versions, secrets, Slurm
partitions, NCCL settings, alert receivers, the torch build against the driver. Each problem
names the file and the key."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from provisioner.ansible.redact import SECRET_KEYS_WITHIN, SECRET_NAME
from provisioner.errors import InputProblem
from provisioner.facts.cuda_compat import torch_driver_problem
from provisioner.facts.monitoring import receiver_problems
from provisioner.facts.munge import munge_key_problem
from provisioner.facts.nccl_profiles import load_profiles
from provisioner.facts.nccl_variables import variable_problem
from provisioner.inventory.model import (
    DATABASE_NAME,
    INFINIBAND_RATES,
    KNOWN_GROUPS,
    REQUIRED_GROUPS,
    VERSION_PATTERN,
    ClusterVars,
    Defined,
)
from provisioner.inventory.reader import Reader, host_name_problem, key_path, lineage, suggestion
from provisioner.inventory.yaml_source import VaultValue
from provisioner.paths import role_defaults


def check_definitions(sites: list[dict[str, Defined]], reader: Reader) -> None:
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
                _check_mungekey_path(defined, reader)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_port(defined: Defined, reader: Reader) -> None:
    value = defined.value
    if isinstance(value, str) and "{{" in value:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        reader.problem(defined.key, f"must be a port number from 1 to 65535 (got {_shown(value)})", defined.file)


def _is_secret_in_clear(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool) and value != "" and "{{" not in str(value)


def _check_secret_in_clear(name: str, defined: Defined, reader: Reader) -> None:
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


def check_accounting(merged: dict[str, dict[str, Defined]], controllers: list[str], reader: Reader) -> None:
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


def _require_secret(variables: dict[str, Defined], name: str, missing: str, reader: Reader) -> None:
    """A secret the inventory must give, as a string (its value never echoed); `missing` says
    why it is needed and where to set it."""
    defined = variables.get(name)
    if defined is None or defined.value in ("", None):
        reader.problem(name, missing, str(Path(reader.hosts_display).parent / "group_vars" / "all.yml"))
    elif not isinstance(defined.value, str | VaultValue):
        reader.problem(defined.key, "must be a string (quote it, or keep it in Ansible Vault)", defined.file)


def check_monitoring_secrets(merged: dict[str, dict[str, Defined]], servers: list[str], reader: Reader) -> None:
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


def _check_mungekey_path(defined: Defined, reader: Reader) -> None:
    """A key in the clear is checked; a vaulted or templated one only Ansible can read (its
    value is never echoed)."""
    if isinstance(defined.value, VaultValue) or defined.value in ("", None) or "{{" in str(defined.value):
        return
    problem = munge_key_problem(defined.value)
    if problem:
        reader.problem(defined.key, problem, defined.file)


def _check_nccl_env(defined: Defined, reader: Reader) -> None:
    if not isinstance(defined.value, dict):
        reader.problem(defined.key, "nccl_env must be a mapping of NCCL variable names to values", defined.file)
        return
    for variable, value in defined.value.items():
        problem = variable_problem(variable, value)
        if problem:
            reader.problem(key_path(defined.key, variable), problem, defined.file)


def _check_nccl_opt_in(defined: Defined, variables: dict[str, Defined], reader: Reader) -> None:
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
                           f"{suggestion(option, options)}; available: {', '.join(options) or 'none'}", defined.file)


# Alert receiver types and the keys each needs (values are not echoed: URLs carry tokens).


def _check_alert_receivers(defined: Defined, reader: Reader) -> None:
    for key, message in receiver_problems(defined.value, (str, VaultValue)):
        reader.problem(defined.key + key, message, defined.file)


def _check_version(defined: Defined, reader: Reader) -> None:
    value = defined.value
    if isinstance(value, bool) or not isinstance(value, str):
        reader.problem(defined.key, f"a version pin must be a quoted string (YAML read {value!r} as "
                       f"{type(value).__name__}: quote it, e.g. \"{value}\")", defined.file)
    elif not VERSION_PATTERN.fullmatch(value):
        reader.problem(defined.key, f"{value!r} is not an exact version (expected e.g. \"535.161.08\" "
                       "or \"22.05.8-4+deb12u3\")", defined.file)


def pydantic_problems(error: ValidationError, variables: dict[str, Defined], missing_at: tuple[str, str],
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
            problems.append(InputProblem(file, key_path(key, top) + rest, f"missing: {hint}"))
    return problems


def _pydantic_message(item: dict) -> str:
    message = item["msg"]
    if item["type"] == "literal_error":
        message = f"{item['input']!r} is not allowed: {message.lower()}"
    elif "input" in item and not isinstance(item["input"], dict | list):
        message = f"{message} (got {_shown(item['input'])})"
    return message


def check_filesystems(cluster: ClusterVars, variables: dict[str, Defined], reader: Reader) -> None:
    """Each filesystem's source suits its type; no two share a name or a mount point."""
    defined = variables.get("storage_filesystems")
    if defined is None:
        return
    paths: set[str] = set()
    names: set[str] = set()
    for index, filesystem in enumerate(cluster.storage_filesystems):
        key = f"{defined.key}[{index}]"
        problem = filesystem.source_problem()
        if problem:
            reader.problem(f"{key}.source", problem, defined.file)
        if filesystem.path in paths:
            reader.problem(f"{key}.path", f"{filesystem.path} is the mount point of another filesystem",
                           defined.file)
        if filesystem.name in names:
            reader.problem(f"{key}.name", f"filesystem {filesystem.name!r} is declared twice", defined.file)
        paths.add(filesystem.path)
        names.add(filesystem.name)


def check_partitions(cluster: ClusterVars, variables: dict[str, Defined], members: dict[str, list[str]],
                      reader: Reader) -> None:
    gpu_nodes = set(members.get("gpu_nodes", []))
    gpu_groups = {g for g in members if g == "gpu_nodes" or "gpu_nodes" in lineage(g, reader.parents)}
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
                               f"{suggestion(node, sorted(gpu_nodes | gpu_groups))}; "
                               "partitions take GPU node names or groups under gpu_nodes", defined.file)
    if len(defaults) > 1:
        reader.problem(defined.key, f"more than one default partition: {', '.join(defaults)}", defined.file)


def check_structure(reader: Reader, members: dict[str, list[str]]) -> None:
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


def check_addresses(hostvars: dict[str, dict[str, Defined]], reader: Reader) -> None:
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




def check_torch_driver(gpu_nodes: list[str], merged: dict[str, dict[str, Defined]], reader: Reader) -> None:
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
