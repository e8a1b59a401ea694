"""Helpers the test modules share: breaking an inventory copy, reading its problems, vault text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from provisioner.errors import InputError
from provisioner.inventory.loader import load_inventory


def edit_yaml(path: Path, change: Callable[[dict], object]) -> None:
    """Load a YAML file, let `change` alter the document, write it back."""
    document = yaml.safe_load(path.read_text())
    change(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def inventory_problems(directory: Path) -> list[str]:
    """The problems validation reports for the inventory (it must report some)."""
    with pytest.raises(InputError) as caught:
        load_inventory(str(directory))
    return [str(problem) for problem in caught.value.problems]


def one_problem(directory: Path, *fragments: str) -> str:
    """The first reported problem that mentions every fragment."""
    found = inventory_problems(directory)
    matching = [p for p in found if all(f in p for f in fragments)]
    assert matching, f"no problem mentions {fragments}; got {found}"
    return matching[0]


def vault_encrypt(text: str, password: str) -> str:
    """`text` encrypted as ansible-vault writes it, with the default vault id."""
    secret = VaultSecret(password.encode())
    return VaultLib([("default", secret)]).encrypt(text, secret).decode()


def last_record(runs: Path, command: str | None = None) -> Path:
    """The newest run record in `runs` (of `command`, e.g. "certify" or "upgrade-steps", if given)."""
    records = sorted(p for p in runs.iterdir() if command is None or p.name.endswith(f"-{command}"))
    assert records, f"no {command or ''} run record in {runs}"
    return records[-1]


def last_summary(runs: Path) -> dict:
    """The summary of the newest run record in `runs`."""
    from provisioner.ansible.records import read_summary

    return read_summary(last_record(runs))


def last_document(runs: Path, command: str, name: str) -> dict:
    """A JSON document (certification.json, replace-node.json, upgrade.json) of the newest record of command."""
    import json

    return json.loads((last_record(runs, command) / name).read_text())
