"""Strict YAML loading: duplicate keys and syntax errors become named input problems."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import InputError, InputProblem


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            mark = key_node.start_mark
            raise _DuplicateKey(str(key), mark.line + 1, mark.column + 1)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int, column: int):
        self.key, self.line, self.column = key, line, column
        super().__init__(key)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass(frozen=True)
class VaultValue:
    """A value encrypted with Ansible Vault (`!vault |`): only Ansible, given the vault
    password, reads its plain text; validation accepts it where a secret string belongs."""

    ciphertext: str

    def __repr__(self) -> str:
        return "VaultValue(...)"


def _construct_vault(loader: _StrictLoader, node: yaml.Node) -> VaultValue:
    if not isinstance(node, yaml.ScalarNode):
        mark = node.start_mark
        raise yaml.constructor.ConstructorError(None, None, "!vault must tag a block of vault text", mark)
    return VaultValue(str(loader.construct_scalar(node)))


_StrictLoader.add_constructor("!vault", _construct_vault)


def load_yaml(path: Path, display: str) -> Any:
    """Load one YAML file; `display` is how the file is named in errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError([InputProblem(display, "", f"cannot read: {error.strerror}")]) from error
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as error:
        problem = InputProblem(
            display,
            error.key,
            f"defined twice (line {error.line}, column {error.column}): "
            "a duplicate key silently replaces the first definition",
        )
        raise InputError([problem]) from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        reason = getattr(error, "problem", None) or str(error)
        problem = InputProblem(display, "", f"YAML syntax error at {where}: {reason}")
        raise InputError([problem]) from error
