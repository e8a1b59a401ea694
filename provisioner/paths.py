"""Where the project's own files are: playbooks, roles, plugins, inventories, run records, the lab."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PLAYBOOKS_DIR = PROJECT_ROOT / "playbooks"
ROLES_DIR = PROJECT_ROOT / "roles"
INVENTORIES_DIR = PROJECT_ROOT / "inventory"
ANSIBLE_CONFIG = PROJECT_ROOT / "ansible.cfg"
CALLBACK_PLUGINS_DIR = PROJECT_ROOT / "callback_plugins"


def runs_dir(override: str | None = None) -> Path:
    """Where run records go: --runs-dir, else $PROVISION_RUNS_DIR, else runs/ of the project."""
    return Path(override or os.environ.get("PROVISION_RUNS_DIR") or PROJECT_ROOT / "runs")


def lab_dir() -> Path:
    """The lab's own files (images' build folders, the package repository, keys): .lab/."""
    return Path(os.environ.get("PROVISION_LAB_DIR", PROJECT_ROOT / ".lab"))


def lab_inventory_dir() -> Path:
    """The inventory `provision lab up` writes: inventory/lab/."""
    return Path(os.environ.get("PROVISION_LAB_INVENTORY", INVENTORIES_DIR / "lab"))


def role_defaults(role: str) -> dict[str, Any]:
    """A role's defaults as written (templated values stay templates): what an inventory that
    sets none of them gets, e.g. the certification role's pins."""
    import yaml

    return yaml.safe_load((ROLES_DIR / role / "defaults" / "main.yml").read_text())
