"""The munge key: inventory keys checked without echoing them, and where a run takes the
cluster's key from (a rebuilt controller recovers the survivors' key; a new key only for a
new cluster)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
import yaml

from provisioner.errors import InputError
from provisioner.facts.munge import key_report, munge_key_checksum, munge_key_problem, munge_key_source
from provisioner.inventory.loader import load_inventory

KEY = bytes(range(256)) * 4  # 1024 bytes, munge's largest key
KEY_B64 = base64.b64encode(KEY).decode()


def report(host: str, key: str | None, adopted: bool = True) -> dict:
    """A host's `<key checksum> <mark>` line as the survey registers it."""
    return {"item": host, "stdout": f"{key or 'none'} {key if key and adopted else 'none'}"}


def test_a_valid_key_has_no_problem_and_its_checksum_is_the_files():
    assert munge_key_problem(KEY_B64) == ""
    assert munge_key_problem(KEY_B64[:76] + "\n" + KEY_B64[76:]) == ""  # wrapped base64 is fine
    assert munge_key_checksum(KEY_B64) == hashlib.sha256(KEY).hexdigest()


@pytest.mark.parametrize(("value", "fragment"), [
    ("", "must be the base64 text"),
    (None, "must be the base64 text"),
    (12345, "must be the base64 text"),
    ("not base64 at all!", "is not valid base64"),
    (base64.b64encode(b"short").decode(), "decodes to 5 bytes"),
    (base64.b64encode(b"x" * 2048).decode(), "decodes to 2048 bytes"),
])
def test_bad_keys_are_named_without_quoting_them(value, fragment):
    problem = munge_key_problem(value)
    assert fragment in problem
    if isinstance(value, str) and value:
        assert value not in problem


def test_a_host_report_tells_an_adopted_key_from_a_package_made_one():
    assert key_report("abc abc") == {"key": "abc", "adopted": True}
    assert key_report("abc none") == {"key": "abc", "adopted": False}
    assert key_report("abc def") == {"key": "abc", "adopted": False}
    assert key_report("none none") == {"key": None, "adopted": False}
    assert key_report("") == {"key": None, "adopted": False}


def test_the_controllers_adopted_key_is_the_source():
    survey = [report("ctl01", "aaa"), report("gpu01", "aaa"), report("gpu02", "bbb", adopted=False)]
    assert munge_key_source("ctl01", survey) == {"action": "copy", "source": "ctl01", "checksum": "aaa"}


def test_a_rebuilt_controllers_package_made_key_loses_to_the_survivors_adopted_key():
    # Debian's munge package made ctl01 a key of its own on install: never marked as adopted.
    survey = [report("ctl01", "fresh", adopted=False), report("gpu01", "ccc"), report("gpu02", "ccc")]
    assert munge_key_source("ctl01", survey) == {"action": "copy", "source": "gpu01", "checksum": "ccc"}


def test_the_adopted_key_most_hosts_hold_wins():
    survey = [report("ctl01", None), report("gpu01", "bbb"), report("gpu02", "ccc"), report("gpu03", "ccc")]
    assert munge_key_source("ctl01", survey) == {"action": "copy", "source": "gpu02", "checksum": "ccc"}


def test_a_survivor_is_enough_even_when_others_are_down():
    survey = [report("ctl01", None), report("gpu01", "bbb"), {"item": "gpu02", "unreachable": True, "msg": "no route"}]
    assert munge_key_source("ctl01", survey) == {"action": "copy", "source": "gpu01", "checksum": "bbb"}


def test_adopted_keys_split_evenly_are_refused():
    decision = munge_key_source("ctl01", [report("ctl01", None), report("gpu01", "bbb"), report("gpu02", "ccc")])
    assert decision["action"] == "refuse"
    assert "2 different munge keys" in decision["reason"] and "slurm_munge_key" in decision["reason"]


def test_a_new_cluster_takes_the_controllers_key_then_the_most_held():
    survey = [report("ctl01", "c", adopted=False), report("gpu01", "g1", adopted=False), report("gpu02", None)]
    assert munge_key_source("ctl01", survey) == {"action": "copy", "source": "ctl01", "checksum": "c"}
    survey = [report("ctl01", None), report("gpu01", "old", adopted=False), report("gpu02", "old", adopted=False)]
    assert munge_key_source("ctl01", survey) == {"action": "copy", "source": "gpu01", "checksum": "old"}


def test_a_new_key_only_when_every_host_answered_without_one():
    survey = [report("ctl01", None), report("gpu01", None), report("gpu02", None)]
    assert munge_key_source("ctl01", survey) == {"action": "create", "source": "ctl01"}


def test_no_new_key_while_a_host_that_may_hold_it_is_silent():
    survey = [report("ctl01", None), report("gpu01", None), {"item": "gpu02", "unreachable": True},
              {"item": "gpu03", "failed": True, "msg": "permission denied"}]
    decision = munge_key_source("ctl01", survey)
    assert decision["action"] == "refuse"
    assert "gpu02, gpu03 did not answer" in decision["reason"]


def _set_key(inventory: Path, value: str, tag: str = "") -> None:
    path = inventory / "group_vars" / "all.yml"
    document = yaml.safe_load(path.read_text())
    document.pop("slurm_munge_key", None)
    text = yaml.safe_dump(document, sort_keys=False)
    path.write_text(text + f"slurm_munge_key: {tag}{value}\n")


def test_a_bad_inventory_key_is_named_by_file_and_key_never_echoed(example_inventory: Path):
    secret = base64.b64encode(b"tiny-secret-key").decode()
    _set_key(example_inventory, f'"{secret}"')
    with pytest.raises(InputError) as caught:
        load_inventory(str(example_inventory))
    problems = [str(problem) for problem in caught.value.problems]
    assert any("all.yml" in p and "slurm_munge_key" in p and "decodes to 15 bytes" in p for p in problems)
    assert not any(secret in p for p in problems)


def test_a_good_key_in_the_clear_and_a_vaulted_key_are_accepted(example_inventory: Path):
    _set_key(example_inventory, f'"{KEY_B64}"')
    assert load_inventory(str(example_inventory)).cluster.model_extra["slurm_munge_key"] == KEY_B64
    vault = ("|\n  $ANSIBLE_VAULT;1.1;AES256\n"
             "  62313365396662343061393464336163383764373764613633653634306231386433626436623361\n"
             "  6134333665353966363534333632666535333761666131620a663537646436643839616531643561\n")
    _set_key(example_inventory, vault, tag="!vault ")
    inventory = load_inventory(str(example_inventory))
    assert "VaultValue" in repr(inventory.cluster.model_extra["slurm_munge_key"])
