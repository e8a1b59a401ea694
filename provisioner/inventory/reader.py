"""Reading an inventory's files: hosts.yml's groups and hosts, group_vars/ and host_vars/,
every variable with the file and key it came from, and the problems found on the way."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.ansible.vault import is_vault_file
from provisioner.errors import InputError, InputProblem
from provisioner.inventory.model import GROUP_KEYS, HOST_LABEL, HOST_NAME_MAX, KNOWN_GROUPS, VARIABLE_NAME, Defined
from provisioner.inventory.yaml_source import EncryptedFile, load_yaml


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):  # elsewhere, or a symbolic link loop
        return str(path)


def key_path(prefix: str, name: Any) -> str:
    return f"{prefix}.{name}" if prefix else str(name)


@dataclass
class Reader:
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
            self.problem(key_path(key, unknown), "unknown key in a group (expected hosts, vars or children)")
        self._read_hosts(name, body.get("hosts"), key_path(key, "hosts"))
        self._read_vars(self.group_vars.setdefault(name, {}), body.get("vars"), key_path(key, "vars"),
                        self.hosts_display)
        children = body.get("children") or {}
        if not isinstance(children, dict):
            self.problem(key_path(key, "children"), "children must be a mapping of group names")
            return
        for child, child_body in children.items():
            child_key = key_path(key_path(key, "children"), child)
            self._check_group_name(name, str(child), child_key)
            self.read_group(str(child), child_body, child_key, parent=name)

    def _check_group_name(self, parent: str, child: str, key: str) -> None:
        if parent == "all" and child not in KNOWN_GROUPS:
            self.problem(key, f"unknown group {child!r}{suggestion(child, KNOWN_GROUPS)}; top-level groups are "
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
            host_key = key_path(key, host)
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
                self.problem(key_path(key, name), f"{str(name)[:80]!r} is not a variable name (letters, digits and "
                             "underscores, not starting with a digit)", file)
                continue
            target[name] = Defined(value, file, key_path(key, name))


def host_name_problem(host: str) -> str | None:
    """Why `host` is not a valid host name, or None."""
    shown = repr(host[:80] + ("..." if len(host) > 80 else ""))
    if len(host) > HOST_NAME_MAX:
        return f"{shown} is not a valid host name: longer than {HOST_NAME_MAX} characters"
    if not all(HOST_LABEL.fullmatch(label) for label in host.split(".")):
        return (f"{shown} is not a valid host name: dot-separated labels of letters, digits, '-' and '_', "
                "each starting and ending with a letter or digit, none empty")
    return None


def suggestion(word: str, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_var_files(directory: Path, known: set[str], kind: str, reader: Reader) -> dict[str, dict[str, Defined]]:
    """Read group_vars/ or host_vars/: `<name>.yml` files or `<name>/` folders of YAML files."""
    found: dict[str, dict[str, Defined]] = {}
    try:
        if not directory.is_dir():
            return found
    except OSError as error:
        reader.problem("", f"cannot read: {error.strerror}", display_path(directory))
        return found
    root = directory.parent.resolve()
    try:
        entries = sorted(directory.iterdir())
    except OSError as error:
        reader.problem("", f"cannot read: {error.strerror or error}", display_path(directory))
        return found
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if not entry.resolve(strict=True).is_relative_to(root):
                reader.problem("", f"links to {entry.resolve()}, outside the inventory: keep every variable file "
                               "inside the inventory folder", display_path(entry))
                continue
            files = sorted(p for p in entry.iterdir() if p.suffix in (".yml", ".yaml")) if entry.is_dir() \
                else [entry]
        except (OSError, RuntimeError) as error:
            reason = getattr(error, "strerror", None) or "a symbolic link loop"
            reader.problem("", f"cannot read: {reason}", display_path(entry))
            continue
        name = entry.name if entry.is_dir() else entry.stem
        if not entry.is_dir() and entry.suffix not in (".yml", ".yaml"):
            continue
        if name not in known:
            reader.problem("", f"no {kind} named {name!r} in hosts.yml{suggestion(name, sorted(known))}",
                           display_path(entry))
            continue
        for path in files:
            display = display_path(path)
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


def lineage(group: str, parents: dict[str, str | None]) -> list[str]:
    chain: list[str] = []
    current: str | None = group
    while current is not None:
        chain.append(current)
        current = parents.get(current)
    return list(reversed(chain))


def members_of(reader: Reader) -> dict[str, list[str]]:
    """Every group's hosts, including those of its descendant groups (in inventory order)."""
    members: dict[str, dict[str, None]] = {name: {} for name in reader.parents}
    for group, hosts in reader.direct_hosts.items():
        for ancestor in lineage(group, reader.parents):
            members[ancestor].update(dict.fromkeys(hosts))
    return {name: list(hosts) for name, hosts in members.items()}


def merged_host_vars(host: str, reader: Reader, file_groups: dict, file_hosts: dict) -> dict[str, Defined]:
    """Ansible's precedence, simplified: all < parent groups < child groups < the host."""
    groups = [g for g, hosts in reader.direct_hosts.items() if host in hosts]
    ordered: list[str] = []
    for group in groups:
        for name in lineage(group, reader.parents):
            if name not in ordered:
                ordered.append(name)
    ordered.sort(key=lambda name: len(lineage(name, reader.parents)))
    merged: dict[str, Defined] = {}
    for name in ordered:
        merged.update(reader.group_vars.get(name, {}))
        merged.update(file_groups.get(name, {}))
    merged.update(reader.host_vars.get(host, {}))
    merged.update(file_hosts.get(host, {}))
    return merged
