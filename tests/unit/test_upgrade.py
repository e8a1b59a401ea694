"""provision upgrade's planning: batches, nodes out of service, what an interrupted run left."""

from __future__ import annotations

import pytest

from provisioner.errors import InputError
from provisioner.facts.fleet import version_changes
from provisioner.operations.upgrade import (
    batch_size,
    next_batch,
    plan_nodes,
    unavailable,
)

NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]


def test_batch_is_a_number_or_a_share_of_the_nodes():
    assert batch_size("2", 16) == 2
    assert batch_size("25%", 16) == 4
    assert batch_size("10%", 4) == 1  # at least one node
    for bad in ("0", "-1", "0%", "150%", "two", ""):
        with pytest.raises(InputError) as error:
            batch_size(bad, 16)
        assert "--batch" in str(error.value)
def test_plan_puts_an_interrupted_upgrade_first_and_skips_done_and_foreign_drains():
    states = {"gpu01": {"idle"}, "gpu02": {"drained"}, "gpu03": {"drained"}, "gpu04": {"idle"}}
    reasons = {"gpu02": "upgrade: driver 550", "gpu03": "bad DIMM"}
    plan = plan_nodes(NODES, states, reasons, differing={"gpu01", "gpu02", "gpu03"},
                      certified_since_change=lambda node: node == "gpu04")
    assert plan.todo == ["gpu02", "gpu01"]
    assert plan.skipped["gpu03"].startswith("out of service (drained; bad DIMM)")
    assert plan.skipped["gpu04"] == "already at the pins, certified since its last change"


def test_a_node_at_the_pins_but_not_certified_since_its_change_is_done_again():
    plan = plan_nodes(NODES, {node: {"idle"} for node in NODES}, {}, differing=set(),
                      certified_since_change=lambda node: False)
    assert plan.todo == NODES and plan.skipped == {}


def test_an_unreachable_node_is_skipped_even_where_an_earlier_upgrade_left_it_and_counts_as_unavailable():
    states = {node: {"idle"} for node in NODES} | {"gpu02": {"drained"}}
    plan = plan_nodes(NODES, states, {"gpu02": "upgrade: driver 550"}, differing=set(NODES),
                      certified_since_change=lambda node: False, unreachable=["gpu02", "gpu04"])
    assert plan.todo == ["gpu01", "gpu03"]
    assert all(plan.skipped[node].startswith("unreachable over SSH") for node in ("gpu02", "gpu04"))
    # Slurm still lists gpu04 idle; it counts all the same, in inventory order, once
    assert unavailable(states, NODES, ["gpu04", "gpu02"]) == ["gpu02", "gpu04"]
    assert unavailable(states, NODES, []) == ["gpu02"]


def test_batches_stay_within_max_unavailable():
    todo = ["gpu01", "gpu02", "gpu03"]
    assert next_batch(todo, [], size=2, max_unavailable=1) == ["gpu01"]
    assert next_batch(todo, [], size=2, max_unavailable=3) == ["gpu01", "gpu02"]
    # a node out for another reason takes the room
    assert next_batch(todo, ["gpu09"], size=1, max_unavailable=1) == []
    # an interrupted batch's node is already out: it comes back first, with no fresh node beside it
    assert next_batch(todo, ["gpu02"], size=1, max_unavailable=1) == ["gpu02"]
    assert next_batch(todo, ["gpu02"], size=2, max_unavailable=2) == ["gpu02", "gpu01"]


def test_version_changes_name_packages_ofed_and_firmware():
    before = {"driver": "535.161.08", "packages": {"nvidia-driver": "535.161.08-1", "rdma-core": "44.0-2"},
              "ofed": None, "hca_firmware": {"MT_0000000838": ["28.39.1002"]}}
    after = {"driver": None, "packages": {"nvidia-driver": "550.54.15-1", "rdma-core": "44.0-2",
                                          "doca-ofed": "24.10-1.1.4"},
             "ofed": "OFED-internal-24.10-1.1.4:", "hca_firmware": {"MT_0000000838": ["28.40.1000"]}}
    assert version_changes(before, after) == [
        "doca-ofed none -> 24.10-1.1.4", "nvidia-driver 535.161.08-1 -> 550.54.15-1",
        "MLNX_OFED/DOCA none -> OFED-internal-24.10-1.1.4:", "HCA firmware (MT_0000000838) 28.39.1002 -> 28.40.1000"]
    assert version_changes(before, before) == []
