#!/usr/bin/env python3
"""Write each role's README.md from its meta/argument_specs.yml (and the values of its
defaults/main.yml): what the role does and every variable it takes.

    scripts/role_readmes.py           write them
    scripts/role_readmes.py --check   exit 1, naming the roles, where a README is out of step
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROLES = Path(__file__).resolve().parent.parent / "roles"
HEADER = "<!-- Generated from meta/argument_specs.yml by scripts/role_readmes.py: edit those, not this. -->"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(value: Any) -> str:
    shown = value if isinstance(value, str) else json.dumps(value)
    shown = _cell(shown)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"`{shown}`" if shown else '`""`'


def _type(spec: dict[str, Any]) -> str:
    kind = spec.get("type", "str")
    if spec.get("elements"):
        kind += f" of {spec['elements']}"
    if spec.get("choices"):
        kind += ": " + ", ".join(str(choice) for choice in spec["choices"])
    return kind


def render(role: Path) -> str:
    """The README of one role."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults_file = role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.exists() else {}
    lines = [HEADER, "", f"# Role `{role.name}`", ""]
    main = specs.get("main", {})
    lines += [_cell(main.get("short_description", "")), ""]
    description = main.get("description")
    if description:
        lines += [_cell(" ".join(description) if isinstance(description, list) else description), ""]
    lines += ["Tasks: `tasks/main.yml` and its phases; tested by `molecule/` (`molecule test` in this folder).", ""]
    for entry, spec in specs.items():
        options = spec.get("options") or {}
        title = "Variables" if entry == "main" else f"Variables of `tasks_from: {entry}`"
        if entry != "main":
            lines += [f"## Entry point `{entry}`", "", _cell(spec.get("short_description", "")), ""]
        if not options:
            continue
        lines += [f"## {title}", "", "| variable | type | default | description |", "|---|---|---|---|"]
        for name, option in options.items():
            if option.get("required"):
                default = "required"
            elif name in defaults:
                default = _value(defaults[name])
            elif "default" in option:
                default = _value(option["default"])
            else:
                default = "(unset)"
            lines.append(f"| `{name}` | {_cell(_type(option))} | {default} | {_cell(option.get('description', ''))} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report the READMEs out of step")
    args = parser.parse_args()
    stale = []
    for role in sorted(path for path in ROLES.iterdir() if (path / "meta" / "argument_specs.yml").exists()):
        text = render(role)
        target = role / "README.md"
        if not target.exists() or target.read_text() != text:
            stale.append(role.name)
            if not args.check:
                target.write_text(text)
    if args.check and stale:
        print(f"out of step with meta/argument_specs.yml: {', '.join(stale)} (run scripts/role_readmes.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
