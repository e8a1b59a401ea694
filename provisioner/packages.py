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
