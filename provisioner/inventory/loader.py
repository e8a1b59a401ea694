"""Inventory loading and validation.

An inventory is a directory `inventory/<name>/` holding `hosts.yml` (Ansible's YAML
inventory format) plus optional `group_vars/` and `host_vars/`. Validation collects every
problem it finds, each naming the file, the key path and what is wrong; nothing touches
a host before the inventory validates.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from provisioner.errors import InputError, InputProblem
from provisioner.inventory.checks import (
    check_accounting,
    check_addresses,
    check_definitions,
    check_filesystems,
    check_monitoring_secrets,
    check_partitions,
    check_structure,
    check_torch_driver,
    pydantic_problems,
)
from provisioner.inventory.model import ClusterVars, GpuNodeVars, Inventory
from provisioner.inventory.reader import Reader, display_path, members_of, merged_host_vars, read_var_files
from provisioner.inventory.yaml_source import EncryptedFile, load_yaml
from provisioner.paths import INVENTORIES_DIR

__all__ = ["Inventory", "load_inventory", "resolve_inventory_dir"]


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


def load_inventory(name_or_path: str) -> Inventory:
    """Load and validate an inventory; raise InputError listing every problem found."""
    directory = resolve_inventory_dir(name_or_path)
    try:
        hosts_file = next((directory / n for n in ("hosts.yml", "hosts.yaml") if (directory / n).is_file()), None)
    except OSError as error:
        raise InputError([InputProblem(display_path(directory), "", f"cannot read: {error.strerror}")]) from None
    if hosts_file is None:
        raise InputError([InputProblem(display_path(directory), "", "no hosts.yml in this inventory directory")])
    reader = Reader(hosts_display=display_path(hosts_file))
    document = load_yaml(hosts_file, reader.hosts_display)
    if isinstance(document, EncryptedFile):
        raise InputError([InputProblem(reader.hosts_display, "", "is encrypted with Ansible Vault: keep hosts.yml "
                                       "in the clear and the secrets in group_vars")])
    reader.read_root(document)
    if reader.problems:
        raise InputError(reader.problems)

    members = members_of(reader)
    file_groups = read_var_files(directory / "group_vars", set(reader.parents), "group", reader)
    file_hosts = read_var_files(directory / "host_vars", set(reader.host_keys), "host", reader)
    check_structure(reader, members)
    check_definitions([*reader.group_vars.values(), *reader.host_vars.values(), *file_groups.values(),
                        *file_hosts.values()], reader)

    merged = {host: merged_host_vars(host, reader, file_groups, file_hosts) for host in reader.host_keys}
    check_addresses(merged, reader)
    check_accounting(merged, members.get("controller", []), reader)
    check_monitoring_secrets(merged, members.get("monitoring", []), reader)

    cluster_defined = {**reader.group_vars.get("all", {}), **file_groups.get("all", {})}
    cluster = ClusterVars()
    try:
        cluster = ClusterVars.model_validate({k: d.value for k, d in cluster_defined.items()})
    except ValidationError as error:
        reader.problems.extend(pydantic_problems(error, cluster_defined, (reader.hosts_display, "all.vars"), ""))
    else:
        check_partitions(cluster, cluster_defined, members, reader)
        check_filesystems(cluster, cluster_defined, reader)

    gpu_nodes: dict[str, GpuNodeVars] = {}
    for host in members.get("gpu_nodes", []):
        variables = merged[host]
        try:
            gpu_nodes[host] = GpuNodeVars.model_validate({k: d.value for k, d in variables.items()})
        except ValidationError as error:
            hint = (f"every GPU node needs gpu_count and gpu_model (on the host, in host_vars/{host}.yml or in "
                    "group_vars/gpu_nodes.yml)")
            reader.problems.extend(
                pydantic_problems(error, variables, (reader.hosts_display, reader.host_keys[host]), hint))

    if gpu_nodes:
        check_torch_driver(list(gpu_nodes), merged, reader)
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
