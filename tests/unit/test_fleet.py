"""Fleet comparison: pinned versions, all-equal when unpinned, the table operators read."""

from __future__ import annotations

from provisioner.fleet import differences, table


def node(driver="535.161.08", vbios=("96.00.74.00.0D",), hca=None, rdma="44.0-2"):
    return {"driver": driver, "gpu_vbios": list(vbios), "rdma_core": rdma, "ofed": None,
            "hca_firmware": hca if hca is not None else {"MT_0000000838": ["28.39.1002"]}}


def test_identical_fleet_has_no_differences():
    fleet = {f"gpu{n:02d}": node() for n in range(1, 17)}
    assert differences(fleet, {}) == []
    assert differences(fleet, {"driver": "535.161.08", "hca_firmware": {"MT_0000000838": "28.39.1002"}}) == []


def test_one_node_off_the_fleet_firmware_is_named_with_both_versions():
    fleet = {f"gpu{n:02d}": node() for n in range(1, 17)}
    fleet["gpu07"] = node(hca={"MT_0000000838": ["28.37.1014"]})
    assert differences(fleet, {}) == [{"host": "gpu07", "component": "HCA firmware (MT_0000000838)",
                                       "expected": "28.39.1002", "found": "28.37.1014"}]


def test_pin_is_enforced_on_every_node_even_when_they_agree():
    fleet = {"gpu01": node(), "gpu02": node()}
    rows = differences(fleet, {"driver": "550.54.15"})
    assert [(r["host"], r["expected"], r["found"]) for r in rows] == [("gpu01", "550.54.15", "535.161.08"),
                                                                      ("gpu02", "550.54.15", "535.161.08")]


def test_mixed_versions_inside_one_node_differ():
    fleet = {"gpu01": node(hca={"MT_0000000838": ["28.39.1002", "28.37.1014"]}), "gpu02": node()}
    rows = differences(fleet, {"hca_firmware": {"MT_0000000838": "28.39.1002"}})
    assert rows == [{"host": "gpu01", "component": "HCA firmware (MT_0000000838)", "expected": "28.39.1002",
                     "found": "28.37.1014, 28.39.1002"}]


def test_even_split_without_pin_flags_every_node():
    rows = differences({"gpu01": node(driver="535.161.08"), "gpu02": node(driver="550.54.15")}, {})
    assert {(r["host"], r["expected"]) for r in rows} == {("gpu01", "one version fleet-wide"),
                                                          ("gpu02", "one version fleet-wide")}


def test_a_node_missing_an_hca_model_differs():
    fleet = {"gpu01": node(), "gpu02": node(), "gpu03": node(hca={})}
    assert differences(fleet, {}) == [{"host": "gpu03", "component": "HCA firmware (MT_0000000838)",
                                       "expected": "28.39.1002", "found": "none"}]


def test_table_lists_host_component_expected_found():
    text = table([{"host": "gpu07", "component": "HCA firmware (MT_0000000838)", "expected": "28.39.1002",
                   "found": "28.37.1014"}])
    header, row = text.splitlines()
    assert header.split() == ["host", "component", "expected", "found"]
    assert row.split()[0] == "gpu07" and row.endswith("28.37.1014")
    assert table([]) == "every node matches"


def test_packages_to_change_names_missing_and_other_versions_only():
    from provisioner.packages import packages_to_change

    installed = {"slurmd": [{"version": "22.05.8-4+deb12u3"}], "munge": [{"version": "0.5.15-2"}],
                 "nvidia-smi": [{"version": "550.54.15-1"}]}
    wanted = {"slurmd": "22.05.8-4+deb12u3", "munge": "", "nvidia-smi": "535.161.08-1", "nvidia-driver": "535.161.08-1"}
    assert packages_to_change(wanted, installed) == ["nvidia-smi", "nvidia-driver"]
    assert packages_to_change({"slurmd": "22.05.8-4+deb12u3", "munge": ""}, installed) == []
