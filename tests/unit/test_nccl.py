"""NCCL settings: every name and value checked as NCCL reads it; profile, derived settings,
opt-ins and overrides merged in a fixed order."""

from __future__ import annotations

import pytest

from provisioner.facts.nccl_profiles import (
    NcclSettingsError,
    ib_hca_setting,
    load_profiles,
    nccl_assignments,
    nccl_environment,
)
from provisioner.facts.nccl_variables import KNOWN_NCCL_VARIABLES, render_value, variable_problem

DERIVED = {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_TOPO_FILE": ""}


@pytest.mark.parametrize(("name", "value"), [
    ("NCCL_IB_TIMEOUT", 22), ("NCCL_IB_TIMEOUT", "22"), ("NCCL_IB_RETRY_CNT", 7), ("NCCL_IB_PKEY", "0x8001"),
    ("NCCL_IB_DISABLE", True), ("NCCL_IB_DISABLE", 0), ("NCCL_DEBUG", "info"), ("NCCL_P2P_LEVEL", "NVL"),
    ("NCCL_P2P_LEVEL", 3), ("NCCL_ALGO", "Ring,Tree"), ("NCCL_ALGO", "^NVLS"),
    ("NCCL_ALGO", "allreduce:tree,ring;broadcast:ring"), ("NCCL_PROTO", "LL128,Simple"),
    ("NCCL_SOCKET_IFNAME", "=eth0"), ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_3:1"), ("NCCL_IB_GID_INDEX", -1),
    ("NCCL_TOPO_FILE", None),
])
def test_values_nccl_accepts(name, value):
    assert variable_problem(name, value) is None


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("NCCL_IB_TIMEOUT", "fast", "NCCL_IB_TIMEOUT must be an integer (got 'fast')"),
    ("NCCL_IB_TIMEOUT", 40, "NCCL_IB_TIMEOUT must be an integer in 1..31 (got 40)"),
    ("NCCL_IB_RETRY_CNT", 8, "an integer in 0..7"),
    ("NCCL_IB_TIMEOUT", True, "must be an integer"),
    ("NCCL_IB_DISABLE", 2, "NCCL_IB_DISABLE must be 0 or 1 (or true/false) (got 2)"),
    ("NCCL_DEBUG", "LOUD", "one of VERSION, WARN, INFO, ABORT, TRACE"),
    ("NCCL_ALGO", "Ring,Trees", "'Trees' is none of them"),
    ("NCCL_PROTO", "", "a comma-separated list of LL, LL128, Simple"),
    ("NCCL_SOCKET_IFNAME", "eth0\neth1", "a one-line, non-empty string"),
    ("NCCL_IB_HCA", ["mlx5_0"], "must be a single value, not a list"),
])
def test_values_nccl_would_drop_are_named(name, value, expected):
    problem = variable_problem(name, value)
    assert problem is not None and expected in problem


def test_typo_gets_a_suggestion_and_non_nccl_names_are_refused():
    assert "did you mean NCCL_IB_TIMEOUT" in variable_problem("NCCL_IB_TIMOUT", 22)
    assert "NCCL would silently ignore it" in variable_problem("NCCL_IB_TIMOUT", 22)
    assert "is not an NCCL variable" in variable_problem("IB_TIMEOUT", 22)
    assert "is not an NCCL variable" in variable_problem("nccl_ib_timeout", 22)


def test_every_known_variable_has_a_type_and_the_field_limits_of_infiniband():
    assert {"NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_ALGO"} \
        <= KNOWN_NCCL_VARIABLES
    assert variable_problem("NCCL_IB_TIMEOUT", 31) is None and variable_problem("NCCL_IB_TIMEOUT", 32)
    assert variable_problem("NCCL_IB_RETRY_CNT", 7) is None and variable_problem("NCCL_IB_RETRY_CNT", -1)


def test_values_are_rendered_as_nccl_reads_them():
    assert render_value("NCCL_IB_DISABLE", True) == "1"
    assert render_value("NCCL_IB_DISABLE", False) == "0"
    assert render_value("NCCL_IB_PKEY", "0x8001") == str(0x8001)
    assert render_value("NCCL_IB_TIMEOUT", "22") == "22"
    assert render_value("NCCL_ALGO", "Ring") == "Ring"


def test_infiniband_profile_carries_the_field_defaults_and_the_node_settings():
    settings = nccl_environment(load_profiles(), "infiniband", DERIVED, [], {})
    assert settings["NCCL_IB_TIMEOUT"] == "22"
    assert settings["NCCL_IB_RETRY_CNT"] == "7"
    assert settings["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert settings["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert "NCCL_TOPO_FILE" not in settings  # derived but empty: left out
    assert "NCCL_ALGO" not in settings  # forcing an algorithm is opt-in only
    assert list(settings) == sorted(settings)


def test_roce_and_ethernet_profiles():
    roce = nccl_environment(load_profiles(), "roce", DERIVED, [], {})
    assert roce["NCCL_IB_GID_INDEX"] == "3" and roce["NCCL_IB_TC"] == "106"
    ethernet = nccl_environment(load_profiles(), "ethernet", DERIVED, [], {})
    assert ethernet["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in ethernet  # no RDMA: the derived HCA list does not apply
    assert ethernet["NCCL_SOCKET_IFNAME"] == "=eth0"


def test_precedence_profile_then_derived_then_opt_in_then_override():
    profiles = {"infiniband": {"settings": {"NCCL_IB_TIMEOUT": 18, "NCCL_IB_HCA": "mlx5"},
                               "derive": ["NCCL_IB_HCA"],
                               "options": {"ring_only": {"why": "-", "settings": {"NCCL_ALGO": "Ring",
                                                                                  "NCCL_IB_TIMEOUT": 20}}}}}
    merged = nccl_environment(profiles, "infiniband", {"NCCL_IB_HCA": "=mlx5_0:1"}, ["ring_only"],
                              {"NCCL_IB_TIMEOUT": 22})
    assert merged == {"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_TIMEOUT": "22"}


def test_override_of_none_removes_a_profile_setting_and_overrides_are_validated():
    profiles = load_profiles()
    assert "NCCL_DEBUG" not in nccl_environment(profiles, "infiniband", DERIVED, [], {"NCCL_DEBUG": None})
    with pytest.raises(NcclSettingsError, match=r"NCCL_IB_RETRY_CNT must be an integer in 0\.\.7"):
        nccl_environment(profiles, "infiniband", DERIVED, [], {"NCCL_IB_RETRY_CNT": 9})
    with pytest.raises(NcclSettingsError, match="did you mean NCCL_IB_TIMEOUT"):
        nccl_environment(profiles, "infiniband", DERIVED, [], {"NCCL_IB_TIMOUT": 22})


def test_opt_in_must_exist_in_the_fabric_profile():
    profiles = load_profiles()
    assert nccl_environment(profiles, "infiniband", DERIVED, ["ring_only"], {})["NCCL_ALGO"] == "Ring"
    with pytest.raises(NcclSettingsError, match="'adaptive_routing' is not an opt-in setting of the roce"):
        nccl_environment(profiles, "roce", DERIVED, ["adaptive_routing"], {})
    with pytest.raises(NcclSettingsError, match="no NCCL profile for fabric 'omnipath'"):
        nccl_environment(profiles, "omnipath", DERIVED, [], {})


def test_every_opt_in_says_why_and_every_profile_setting_is_valid():
    for fabric, profile in load_profiles().items():
        for name, value in profile["settings"].items():
            assert variable_problem(name, value) is None, (fabric, name)
        for option, details in profile["options"].items():
            assert len(details["why"]) > 40, (fabric, option)
            for name, value in details["settings"].items():
                assert variable_problem(name, value) is None, (fabric, option, name)


def test_ib_hca_is_an_exact_match_list():
    assert ib_hca_setting(["mlx5_0:1", "mlx5_1:1"]) == "=mlx5_0:1,mlx5_1:1"
    assert ib_hca_setting([]) == ""


def test_assignments_are_read_from_env_output_and_export_lines():
    lines = ["PATH=/usr/bin", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1", "export NCCL_IB_TIMEOUT=22", "NCCL_BAD NAME=1",
             "NCCL_DEBUG="]
    assert nccl_assignments(lines) == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_TIMEOUT": "22",
                                       "NCCL_DEBUG": ""}
