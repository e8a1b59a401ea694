"""Which pinned packages a host still has to install, from its package facts."""

from __future__ import annotations

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
