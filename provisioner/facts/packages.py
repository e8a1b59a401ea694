"""Which pinned packages a host still has to install, from its package facts."""

from __future__ import annotations

import json
from typing import Any


def packages_to_change(wanted: dict[str, str], installed: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Names of `wanted` packages (name -> exact version, or "" for any) that are missing or
    at another version in `installed` (Ansible's package_facts). Empty: apt has nothing to do,
    and the role skips it (a no-op apt run costs seconds on every host)."""
    changes = []
    for name, version in wanted.items():
        present = installed.get(name) or []
        if not present or (version and all(entry.get("version") != version for entry in present)):
            changes.append(name)
    return changes


# dpkg-query's own escapes: one tab-separated line per package (name, version, selection, status).
DPKG_QUERY_FORMAT = r"${Package}\t${Version}\t${db:Status-Want}\t${db:Status-Status}\n"


def dpkg_query_argv(names: list[str]) -> list[str]:
    """The command that lists the versions and holds of these packages (exit 1: some are not
    installed; the others are still listed). Run it with the command module's
    expand_argument_vars off, so the ${...} fields reach dpkg-query."""
    return ["dpkg-query", "--show", f"--showformat={DPKG_QUERY_FORMAT}", *names]


def dpkg_state(text: str) -> dict[str, dict[str, Any]]:
    """The installed packages of a `dpkg_query_argv` listing: name -> {version, held}.
    Packages dpkg only remembers (removed, config files left) are not installed: left out."""
    state: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 4 or fields[3].strip() != "installed":
            continue
        name, version, want = fields[0].strip(), fields[1].strip(), fields[2].strip()
        state[name] = {"version": version, "held": want == "hold"}
    return state


def as_package_facts(state: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """dpkg_state in the shape of Ansible's package_facts (name -> [{version}])."""
    return {name: [{"name": name, "version": entry["version"], "source": "apt"}] for name, entry in state.items()}


def holds_to_release(wanted: dict[str, str], state: dict[str, dict[str, Any]]) -> list[str]:
    """Held packages that must move to another pinned version (apt will not move a held one)."""
    return [name for name, version in wanted.items()
            if version and name in state and state[name]["held"] and state[name]["version"] != version]


def holds_to_set(wanted: dict[str, str], state: dict[str, dict[str, Any]]) -> list[str]:
    """Pinned packages that are not held yet (installed or about to be)."""
    return [name for name, version in wanted.items() if version and not (state.get(name) or {}).get("held")]


def apt_names(wanted: dict[str, str]) -> list[str]:
    """apt's `name=version` for pinned packages, the bare name for the others."""
    return [f"{name}={version}" if version else name for name, version in wanted.items()]


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def pip_pins_to_install(pins: list[str], pip_list_json: str) -> list[str]:
    """The `name==version` pins not satisfied by `pip list --format=json` of a virtual
    environment. A local version label counts as the version (2.13.0+cpu is 2.13.0), as pip
    itself counts it; an unreadable list (no venv yet) means every pin."""
    try:
        installed = {_canonical(entry["name"]): entry["version"] for entry in json.loads(pip_list_json)}
    except (ValueError, TypeError, KeyError):
        return list(pins)
    missing = []
    for pin in pins:
        name, _, version = pin.partition("==")
        if installed.get(_canonical(name.strip()), "").split("+")[0] != version.strip():
            missing.append(pin)
    return missing
