"""Fuzzing the inventory validator: whatever the files hold, `provision inventory validate`
exits 0 or 2, prints no traceback and writes nothing."""

from __future__ import annotations

import copy
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.cli import main
from provisioner.paths import PROJECT_ROOT

CASES = 1200
SEED = 20261207
FILES = ("hosts.yml", "group_vars/all.yml", "group_vars/gpu_nodes.yml")
ODD_STRINGS = ["", " ", "[red]x[/]", "[/]", "a\nb", "{{ x }}", "{% if %}", "-oProxyCommand=x", "0.0.0.0",
               "10.10.1.011", "\u202egpu", "\x00", "ALL", "null", "~", "*", "&a", "!vault", "$ANSIBLE_VAULT;1.1",
               "535.161.08\n", "g" * 70, "gpu..01", "../../etc/passwd", "65536", "-1", "1e309", "NaN"]


def _random_scalar(rng: random.Random) -> Any:
    choice = rng.randrange(9)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False])
    if choice == 2:
        return rng.choice([0, -1, 1, 65536, 2**63, 10**400 if rng.random() < 0.1 else 7])
    if choice == 3:
        return rng.choice([0.0, -1.5, float("inf"), 1e-300])
    if choice == 4:
        return "x" * rng.choice([1, 1000, 200_000])
    return rng.choice(ODD_STRINGS)


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(6)
    if choice == 0 and depth < 3:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if choice == 1 and depth < 3:
        return {str(_random_scalar(rng))[:20]: _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    if choice == 2:
        nested: Any = "bottom"
        for _ in range(rng.choice([10, 70, 200])):
            nested = [nested]
        return nested
    return _random_scalar(rng)


def _paths(document: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += _paths(value, (*prefix, index))
    return found


def _mutate_structure(document: Any, rng: random.Random) -> Any:
    document = copy.deepcopy(document)
    for _ in range(rng.randrange(1, 4)):
        paths = [p for p in _paths(document) if p]
        if not paths:
            return _random_value(rng)
        path = rng.choice(paths)
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        action = rng.randrange(4)
        if action == 0:
            parent[last] = _random_value(rng)
        elif action == 1 and isinstance(parent, dict):
            del parent[last]
        elif action == 2 and isinstance(parent, dict):
            parent[str(_random_scalar(rng))[:30]] = parent.pop(last)
        else:
            parent[last] = [parent[last]] if rng.random() < 0.5 else {"wrapped": parent[last]}
    return document


def _mutate_text(text: str, rng: random.Random) -> bytes:
    data = bytearray(text.encode())
    action = rng.randrange(5)
    if action == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000)))
    if action == 1:
        for _ in range(rng.randrange(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if action == 2:
        cut = rng.randrange(len(data))
        return bytes(data[:cut])
    if action == 3:
        snippet = rng.choice(["&a [1, *a]", "? [a]\n: 1", "<<: *nope", "!!python/object:os.system x", "%YAML 9.9",
                              "---\n---", "\t", "x: " + "{" * 500, "a: &b " + "[*b]" * 3, "!vault |\n  xyz"])
        position = rng.randrange(len(data))
        return bytes(data[:position]) + f"\n{snippet}\n".encode() + bytes(data[position:])
    return "\n".join(rng.sample(text.splitlines(), k=len(text.splitlines()))).encode()


def _dump(document: Any) -> bytes:
    try:
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True).encode()
    except (yaml.YAMLError, RecursionError, ValueError):
        return b"not: [dumpable"


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("base", ["example"])
def test_the_validator_never_crashes_and_never_writes(tmp_path: Path, base: str, monkeypatch, capsys):
    original = PROJECT_ROOT / "inventory" / base
    inventory = tmp_path / "inv"
    runs = tmp_path / "runs"
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(runs))
    texts = {name: (original / name).read_text() for name in FILES}
    documents = {name: yaml.safe_load(text) for name, text in texts.items()}
    rng = random.Random(SEED)
    exits: dict[int, int] = {}
    for case in range(CASES):
        shutil.rmtree(inventory, ignore_errors=True)
        shutil.copytree(original, inventory)
        target = rng.choice(FILES)
        if rng.random() < 0.5:
            content = _mutate_text(texts[target], rng)
        else:
            content = _dump(_mutate_structure(documents[target], rng))
        (inventory / target).write_bytes(content)
        before = _snapshot(inventory)
        code = main(["inventory", "validate", "-i", str(inventory)])  # any exception fails the test here
        output = capsys.readouterr()
        assert code in (0, 2), f"case {case} ({target}) exited {code}:\n{output.err[-2000:]}"
        assert "Traceback" not in output.err + output.out, f"case {case} ({target})"
        assert _snapshot(inventory) == before, f"case {case} ({target}) changed the inventory"
        assert not runs.exists(), f"case {case} ({target}) wrote a run record"
        exits[code] = exits.get(code, 0) + 1
    # The mutations must mostly break the inventory, or the fuzzing tests little.
    assert exits.get(2, 0) > CASES // 2, exits
