"""Strict YAML loading: duplicate keys, syntax errors and hostile input become named input problems.

Hostile input is refused before it is built: a file too large, not UTF-8 text, nested too
deep, a mapping key that is itself a list or mapping, or aliases whose expansion is too large
(an alias bomb: a few lines that expand to billions of nodes for any code that walks them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioner.ansible.vault import decrypt, is_vault_text
from provisioner.errors import InputError, InputProblem

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
# Nodes of the document with every alias expanded: an inventory of 10,000 hosts with a few
# dozen variables each stays well below it.
MAX_EXPANDED_NODES = 2_000_000


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


@dataclass(frozen=True)
class EncryptedFile:
    """A whole file encrypted with Ansible Vault whose password is not at hand: Ansible reads it
    at run time; validation cannot see its variables."""

    display: str


def _refuse(display: str, message: str) -> InputError:
    return InputError([InputProblem(display, "", message)])


def read_text(path: Path, display: str) -> str:
    """A file's text: refused when unreadable, too large, binary or not UTF-8."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise _refuse(display, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB: not an inventory file")
        data = path.read_bytes()
    except OSError as error:
        raise _refuse(display, f"cannot read: {error.strerror or error}") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise _refuse(display, "is UTF-16 text: save it as UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _refuse(display, f"not UTF-8 text (byte {error.start}): save it as UTF-8") from None
    if "\x00" in text:
        raise _refuse(display, "is a binary file (it holds NUL bytes), not YAML")
    return text


def _check_graph(root: yaml.Node, display: str) -> None:
    """Refuse keys that are collections, nesting deeper than MAX_DEPTH, aliases that refer to
    themselves, and documents whose alias expansion exceeds MAX_EXPANDED_NODES."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth below)
    open_nodes: set[int] = set()

    def where(node: yaml.Node) -> str:
        return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"

    def visit(node: yaml.Node, depth: int) -> tuple[int, int]:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise _refuse(display, f"an alias at {where(node)} refers to the collection that holds it")
        if depth > MAX_DEPTH:
            raise _refuse(display, f"nested more than {MAX_DEPTH} levels deep (at {where(node)})")
        size, below = 1, 0
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            open_nodes.add(id(node))
            children: list[yaml.Node] = []
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if not isinstance(key, yaml.ScalarNode):
                        raise _refuse(display, f"a key at {where(key)} is a list or mapping: keys must be names")
                    children += [key, value]
            else:
                children = list(node.value)
            for child in children:
                child_size, child_below = visit(child, depth + 1)
                size += child_size
                below = max(below, child_below + 1)
                if size > MAX_EXPANDED_NODES:
                    raise _refuse(display, f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values "
                                           f"(at {where(node)}): not an inventory")
            open_nodes.discard(id(node))
        sizes[id(node)] = (size, below)
        return size, below

    visit(root, 0)


def _parse(text: str, display: str) -> Any:
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node, display)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(path: Path, display: str) -> Any:
    """Load one YAML file; `display` is how the file is named in errors. A vault-encrypted file
    is decrypted with the run's vault secrets, or is an EncryptedFile without them."""
    text = read_text(path, display)
    if is_vault_text(text):
        plain = decrypt(text)
        if plain is None:
            return EncryptedFile(display)
        text = plain
    try:
        return _parse(text, display)
    except RecursionError:
        raise _refuse(display, f"nested too deep (more than {MAX_DEPTH} levels): not an inventory") from None
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
