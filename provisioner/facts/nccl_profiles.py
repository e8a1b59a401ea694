"""The NCCL environment of a node: its fabric's profile, the settings derived on the node,
the opt-ins chosen, and the inventory's overrides, merged in that order and validated.

The profiles are data of the `nccl` role (roles/nccl/vars/main.yml); this module is the
merge, so the role and the inventory validation use the same rules.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from provisioner.facts.nccl_variables import render_value, variable_problem
from provisioner.paths import PROJECT_ROOT

PROFILES_FILE = "roles/nccl/vars/main.yml"


@cache
def load_profiles() -> dict[str, dict[str, Any]]:
    """The role's `_nccl_profiles`, by fabric."""
    import yaml

    document = yaml.safe_load((PROJECT_ROOT / PROFILES_FILE).read_text(encoding="utf-8"))
    return document["_nccl_profiles"]


class NcclSettingsError(ValueError):
    """The merged settings are not what NCCL would apply (a typo, a bad value, an unknown opt-in)."""


def nccl_environment(profiles: dict[str, dict[str, Any]], fabric: str, derived: dict[str, Any],
                     opt_in: list[str], overrides: dict[str, Any]) -> dict[str, str]:
    """NAME -> value as NCCL reads it, sorted by name.

    Order of precedence, lowest first: the profile's settings, the settings derived on the
    node that the profile uses (empty ones are left out), the opt-in options, the overrides
    (an override of None removes the setting).
    """
    if fabric not in profiles:
        raise NcclSettingsError(f"no NCCL profile for fabric {fabric!r} (profiles: {', '.join(sorted(profiles))})")
    profile = profiles[fabric]
    merged: dict[str, Any] = dict(profile.get("settings") or {})
    for name in profile.get("derive") or []:
        if derived.get(name) not in (None, ""):
            merged[name] = derived[name]
    options = profile.get("options") or {}
    for option in opt_in:
        if option not in options:
            raise NcclSettingsError(f"{option!r} is not an opt-in setting of the {fabric} NCCL profile "
                                    f"(available: {', '.join(sorted(options)) or 'none'})")
        merged.update(options[option]["settings"])
    for name, value in overrides.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    problems = [problem for name, value in merged.items() if (problem := variable_problem(name, value))]
    if problems:
        raise NcclSettingsError("; ".join(problems))
    return {name: render_value(name, merged[name]) for name in sorted(merged)}


def ib_hca_setting(devices: list[str]) -> str:
    """NCCL_IB_HCA for exactly these `device:port`s. The leading '=' makes NCCL match names
    exactly: without it `mlx5_1` would also select mlx5_10 and mlx5_11."""
    return "=" + ",".join(devices) if devices else ""


def nccl_assignments(lines: list[str]) -> dict[str, str]:
    """The NCCL_* variables of `env` output or of `export NAME=value` lines, as NAME -> value."""
    settings = {}
    for line in lines:
        name, equals, value = line.removeprefix("export ").partition("=")
        if equals and name.startswith("NCCL_") and name.replace("_", "").isalnum():
            settings[name] = value
    return settings
