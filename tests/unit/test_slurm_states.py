"""Slurm's node states: the one sinfo parser, the flag rule and the predicates every command uses."""

from __future__ import annotations

import pytest

from provisioner.parsers import slurm


def test_node_details_keep_a_reason_with_bars_and_list_a_node_once():
    text = "gpu01|idle|gpu:h100:8|none\ngpu02|drained|gpu:h100:8|health: GPU 1 has 2 uncorrectable ECC errors\n" \
           "gpu01|idle|gpu:h100:8|none\ngpu03|idle*|gpu:h100:8|Not responding\ngpu04|down|gpu:h100:8|a|b\n\n"
    details = slurm.node_details(text)
    assert details["gpu02"] == {"state": "drained", "gres": "gpu:h100:8",
                                "reason": "health: GPU 1 has 2 uncorrectable ECC errors"}
    assert details["gpu03"]["state"] == "idle*" and details["gpu04"]["reason"] == "a|b" and len(details) == 4


def test_node_states_per_partition_lower_case():
    assert slurm.node_states("gpu01|IDLE\ngpu01|mixed\ngpu02|drained*\nbroken line\n") == {
        "gpu01": {"idle", "mixed"}, "gpu02": {"drained*"}}


def test_reasons_by_node():
    text = "gpu01|upgrade: driver 550\ngpu02|none\ngpu03|replace-node: build: x|y\n"
    assert slurm.node_reasons(text) == {"gpu01": "upgrade: driver 550", "gpu02": "",
                                        "gpu03": "replace-node: build: x|y"}


def test_cpus_per_node():
    assert slurm.node_cpus("a|64\nb|64\na|64\nc|n/a\n") == {"a": 64, "b": 64}


@pytest.mark.parametrize(("state", "settled"), [
    ("idle", True), ("mixed", True), ("allocated", True), ("drained", True), ("draining", True),
    ("reserved", True), ("idle*", False), ("down", False), ("down*", False), ("fail", False),
    ("unknown", False), ("allocated+", True), ("drained*", False),
])
def test_settled_states(state: str, settled: bool):
    assert slurm.settled(state) is settled


def test_unsettled_nodes_are_missing_or_not_responding():
    text = "gpu01|idle|gpu:h100:8|none\ngpu02|idle*|gpu:h100:8|none\ngpu03|drained|gpu:h100:8|bad\n"
    assert slurm.unsettled_nodes(text, ["gpu01", "gpu02", "gpu03", "gpu04"]) == ["gpu02", "gpu04"]


def test_out_of_service_states():
    states = {"gpu01": {"drained"}, "gpu02": {"idle"}, "gpu03": {"mixed*"}, "gpu04": {"allocated"},
              "gpu05": {"down"}, "gpu06": {"reboot_issued"}, "gpu07": {"draining"}, "gpu08": {"idle~"},
              "gpu10": {"idle", "drained"}}
    assert slurm.nodes_out_of_service(states, [*states, "gpu09"]) == [
        "gpu01", "gpu03", "gpu05", "gpu06", "gpu07", "gpu10", "gpu09"]


@pytest.mark.parametrize(("states", "in_service"), [
    ({"idle"}, True), ({"mixed", "allocated"}, True), (set(), False), ({"drained"}, False),
    ({"idle*"}, False), ({"maint"}, False), ({"idle", "down"}, False), ({"idle$"}, False), ({"completing"}, True),
])
def test_in_service_after_a_resume(states: set[str], in_service: bool):
    assert slurm.in_service(states) is in_service


@pytest.mark.parametrize(("state", "reserved", "free"), [
    ("idle", False, True), ("idle+", False, True), ("idle*", False, False), ("reserved", False, False),
    ("reserved", True, True), ("maint", True, True), ("allocated", True, False), ("drained", False, False),
])
def test_free_for_a_job(state: str, reserved: bool, free: bool):
    assert slurm.free_for_job(state, in_reservation=reserved) is free


def test_host_lists_expand():
    assert slurm.hostnames("gpu[01,04-05],login1") == {"gpu01", "gpu04", "gpu05", "login1"}
