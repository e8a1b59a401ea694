"""Fleet comparison: pinned versions, all-equal when unpinned, the table operators read."""

from __future__ import annotations

from collections import Counter

from provisioner.facts.fleet import differences, table


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


def test_even_split_without_pin_flags_every_node_and_says_it_is_a_tie():
    rows = differences({"gpu01": node(driver="535.161.08"), "gpu02": node(driver="550.54.15")}, {})
    tie = "one version fleet-wide (a tie: 535.161.08 and 550.54.15, 1 each)"
    assert {(r["host"], r["expected"], r["found"]) for r in rows} == {("gpu01", tie, "535.161.08"),
                                                                      ("gpu02", tie, "550.54.15")}


def counted(vbios_per_gpu, hca_per_device=("28.39.1002",) * 8):
    """A node's facts as the firmware role gathers them: versions and their device counts."""
    facts = node(vbios=sorted(set(vbios_per_gpu)), hca={"MT_0000000838": sorted(set(hca_per_device))})
    facts["device_counts"] = {"gpu_vbios": dict(Counter(vbios_per_gpu)),
                              "hca_firmware:MT_0000000838": dict(Counter(hca_per_device))}
    return facts


def test_unpinned_reference_is_the_version_most_devices_run():
    # One GPU of gpu01 at another VBIOS than the other 15: gpu01 differs, gpu02 does not.
    fleet = {"gpu01": counted(["96.00.74.00.0D"] * 7 + ["96.00.74.00.0E"]), "gpu02": counted(["96.00.74.00.0D"] * 8)}
    assert differences(fleet, {}) == [{"host": "gpu01", "component": "GPU VBIOS", "expected": "96.00.74.00.0D",
                                       "found": "96.00.74.00.0D, 96.00.74.00.0E"}]


def test_unpinned_hca_firmware_reference_counts_hcas_not_hosts():
    # gpu01's eight HCAs at 28.39 outweigh gpu02, whose HCAs are split 4 / 4 between 28.39 and 28.37.
    fleet = {"gpu01": counted(["96.00.74.00.0D"] * 8),
             "gpu02": counted(["96.00.74.00.0D"] * 8, ["28.37.1014"] * 4 + ["28.39.1002"] * 4)}
    assert [(r["host"], r["expected"]) for r in differences(fleet, {})] == [("gpu02", "28.39.1002")]


def test_a_tie_between_devices_names_every_node():
    fleet = {"gpu01": counted(["A"] * 4 + ["B"] * 4), "gpu02": counted(["A"] * 4 + ["B"] * 4)}
    rows = differences(fleet, {})
    assert [r["host"] for r in rows] == ["gpu01", "gpu02"]
    assert rows[0]["expected"] == "one version fleet-wide (a tie: A and B, 8 each)"


def test_records_without_device_counts_count_each_version_once():
    # versions recorded by an older apply carry no counts: each version a host reports counts once.
    fleet = {"gpu01": node(vbios=["X", "Y"]), "gpu02": node(vbios=["X"]), "gpu03": counted(["X"] * 8)}
    assert [(r["host"], r["expected"]) for r in differences(fleet, {})] == [("gpu01", "X")]


def test_node_versions_count_gpus_per_vbios_and_hcas_per_firmware(real_outputs):
    from provisioner.facts.fleet import node_versions

    smi = (real_outputs / "nvidia-smi" / "nvidia-smi-q_h100x8_535.161.08.txt").read_text()
    odd = smi.replace("96.00.74.00.0D", "96.00.74.00.0E", 1)
    mlx = (real_outputs / "mlxfwmanager" / "mlxfwmanager_connectx6dx_MCX623106AN-CDA_update_required.txt").read_text()
    versions = node_versions(odd, mlx, {}, "")
    assert versions["gpu_vbios"] == ["96.00.74.00.0D", "96.00.74.00.0E"]
    assert versions["device_counts"] == {"gpu_vbios": {"96.00.74.00.0D": 7, "96.00.74.00.0E": 1},
                                         "hca_firmware:MT_0000000359": {"22.31.1014": 1}}


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
    from provisioner.facts.packages import packages_to_change

    installed = {"slurmd": [{"version": "22.05.8-4+deb12u3"}], "munge": [{"version": "0.5.15-2"}],
                 "nvidia-smi": [{"version": "550.54.15-1"}]}
    wanted = {"slurmd": "22.05.8-4+deb12u3", "munge": "", "nvidia-smi": "535.161.08-1", "nvidia-driver": "535.161.08-1"}
    assert packages_to_change(wanted, installed) == ["nvidia-smi", "nvidia-driver"]
    assert packages_to_change({"slurmd": "22.05.8-4+deb12u3", "munge": ""}, installed) == []
