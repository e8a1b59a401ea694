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
