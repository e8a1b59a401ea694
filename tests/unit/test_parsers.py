"""Parsers against real outputs (tests/fixtures) and the ways formats drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.parsers import (
    ParseError,
    parse_dcgm_metrics,
    parse_dcgmi_diag,
    parse_flint,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_mlxfwmanager,
    parse_nvidia_smi_csv,
    parse_nvidia_smi_q,
)


def read(fixtures: Path, name: str) -> str:
    return (fixtures / name).read_text()


H100_Q = "nvidia-smi/nvidia-smi-q_h100x8_535.161.08.txt"
A10_Q = "nvidia-smi/nvidia-smi-q_a10x1_535.129.03.txt"
IBSTAT_H100 = "ibstat/ibstat_h100_cx7_ndr400_ib_3ports_down.txt"
IBSTAT_A100 = "ibstat/ibstat_a100_oci_mt4126_vf_fw28.37_200g_8ib_1eth.txt"
MLXFW = "mlxfwmanager/mlxfwmanager_connectx6dx_MCX623106AN-CDA_update_required.txt"
DIAG = "dcgm/dcgmi_diag_r3_verbose_v100-pcie-16gb_dcgm3.3.9_all_pass.txt"
METRICS = "dcgm/dcgm-exporter_metrics_l4_aws_kops_driver580.105.08.txt"


# nvidia-smi -q ---------------------------------------------------------------------------------

def test_nvidia_smi_h100_newer_ecc_layout(real_outputs: Path):
    facts = parse_nvidia_smi_q(read(real_outputs, H100_Q))
    assert facts["driver_version"] == "535.161.08" and facts["cuda_version"] == "12.2"
    assert len(facts["gpus"]) == 8
    assert {gpu["vbios_version"] for gpu in facts["gpus"]} == {"96.00.74.00.0D"}
    first = facts["gpus"][0]
    assert first["index"] == 0 and first["name"] == "NVIDIA H100 80GB HBM3" and first["bus_id"] == "00000000:19:00.0"
    assert first["ecc_errors"] == {"volatile": {"correctable": 0, "uncorrectable": 0},
                                   "aggregate": {"correctable": 0, "uncorrectable": 0}}
    assert first["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert [gpu["index"] for gpu in facts["gpus"]] == list(range(8))


def test_nvidia_smi_a10_older_ecc_layout_and_pending_remap(real_outputs: Path):
    facts = parse_nvidia_smi_q(read(real_outputs, A10_Q))
    assert facts["driver_version"] == "535.129.03"
    (gpu,) = facts["gpus"]
    assert gpu["vbios_version"] == "94.02.5C.00.04"
    assert gpu["ecc_errors"]["volatile"] == {"correctable": 0, "uncorrectable": 0}
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 4, "pending": True, "failure": False}


def test_nvidia_smi_sums_the_split_sram_dram_counters(real_outputs: Path):
    text = read(real_outputs, H100_Q)
    first_gpu_end = text.index("GPU 00000000:3B:00.0")
    head = text[:first_gpu_end]
    for label, count in (("SRAM Uncorrectable Parity", 2), ("DRAM Uncorrectable", 3), ("DRAM Correctable", 5)):
        line = f"            {label.ljust(30)}: "
        head = head.replace(line + "0", line + str(count), 1)
    gpu = parse_nvidia_smi_q(head + text[first_gpu_end:])["gpus"][0]
    assert gpu["ecc_errors"]["volatile"] == {"correctable": 5, "uncorrectable": 5}
    assert gpu["ecc_errors"]["aggregate"] == {"correctable": 0, "uncorrectable": 0}


def test_nvidia_smi_tabs_trailing_spaces_and_extra_lines(real_outputs: Path):
    text = read(real_outputs, H100_Q)
    tabbed = "\n".join(line.replace("    ", "\t") + "   " for line in text.splitlines())
    tabbed = tabbed.replace("Attached GPUs", "Some Future Field                         : 1\nAttached GPUs")
    assert parse_nvidia_smi_q(tabbed) == parse_nvidia_smi_q(text)


def test_nvidia_smi_excerpt_with_elided_parts(real_outputs: Path):
    lines = read(real_outputs, A10_Q).splitlines()
    keep = [line for line in lines if "Clocks" not in line]
    excerpt = "\n".join(keep[:40] + ["    ..."] + [line for line in keep if "Remapped" in line or "Error" in line
                                                   or "Pending" in line or "Remapping Failure" in line])
    gpu = parse_nvidia_smi_q(excerpt)["gpus"][0]
    assert gpu["vbios_version"] == "94.02.5C.00.04"
    assert gpu["remapped_rows"]["uncorrectable"] == 4 and gpu["remapped_rows"]["pending"] is True


LEGACY_ECC = """
==============NVSMI LOG==============

Driver Version                      : 418.87.01
CUDA Version                        : 10.1

Attached GPUs                       : 1
GPU 00000000:00:1E.0
    Product Name                    : Tesla V100-SXM2-16GB
    VBIOS Version                   : 88.00.4F.00.09
    ECC Errors
        Volatile
            Single Bit
                Device Memory       : 3
                Register File       : 0
                Total               : 3
            Double Bit
                Device Memory       : 1
                Total               : 1
        Aggregate
            Single Bit
                Total               : N/A
            Double Bit
                Total               : N/A
    Retired Pages
        Single Bit ECC              : 0
"""


def test_nvidia_smi_legacy_single_double_bit_layout():
    gpu = parse_nvidia_smi_q(LEGACY_ECC)["gpus"][0]
    assert gpu["ecc_errors"]["volatile"] == {"correctable": 3, "uncorrectable": 1}
    assert gpu["ecc_errors"]["aggregate"] == {"correctable": None, "uncorrectable": None}
    assert gpu["remapped_rows"] == {"correctable": None, "uncorrectable": None, "pending": None, "failure": None}


def test_nvidia_smi_rejects_other_text(real_outputs: Path):
    with pytest.raises(ParseError, match="not nvidia-smi -q output"):
        parse_nvidia_smi_q(read(real_outputs, IBSTAT_H100))


def test_nvidia_smi_csv_with_header_units():
    text = ("index, name, memory.total [MiB], driver_version, power.draw [W]\n"
            "0, NVIDIA H100 80GB HBM3, 81559 MiB, 535.161.08, 68.50 W\n"
            "1, NVIDIA H100 80GB HBM3, 81559 MiB, 535.161.08, [N/A]\n")
    gpus = parse_nvidia_smi_csv(text)["gpus"]
    assert gpus[0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory.total": 81559,
                       "driver_version": "535.161.08", "power.draw": 68.5}
    assert gpus[1]["power.draw"] is None


def test_nvidia_smi_csv_noheader_needs_the_fields():
    gpus = parse_nvidia_smi_csv("0, 550.54.15\n1, 550.54.15\n", fields=["index", "driver_version"])["gpus"]
    assert gpus == [{"index": 0, "driver_version": "550.54.15"}, {"index": 1, "driver_version": "550.54.15"}]
    with pytest.raises(ParseError):
        parse_nvidia_smi_csv("0, 550.54.15\n")


# ibstat / ibv_devinfo --------------------------------------------------------------------------

def test_ibstat_h100_cx7(real_outputs: Path):
    facts = parse_ibstat(read(real_outputs, IBSTAT_H100))
    assert len(facts["cas"]) == 12 and facts["errors"] == []
    ib = [ca for ca in facts["cas"] if ca["ca_type"] == "MT4129"]
    assert len(ib) == 8
    assert {ca["firmware_version"] for ca in ib} == {"28.39.1002"}
    assert all(ca["ports"][0] | {"base_lid": None} == {"port": 1, "state": "Active", "physical_state": "LinkUp",
                                                       "rate_gbps": 400, "link_layer": "InfiniBand",
                                                       "base_lid": None, "sm_lid": 334} for ca in ib)
    assert all(len(ca["ports"]) == 1 and ca["ports"][0]["base_lid"] > 0 for ca in ib)
    eth = [ca for ca in facts["cas"] if ca["ca_type"] == "MT4125"]
    assert len(eth) == 4 and {ca["firmware_version"] for ca in eth} == {"22.38.1002"}
    down = [ca["name"] for ca in eth if ca["ports"][0]["state"] == "Down"]
    assert len(down) == 3
    assert all(ca["ports"][0]["link_layer"] == "Ethernet" for ca in eth)


def test_ibstat_a100_virtual_functions(real_outputs: Path):
    facts = parse_ibstat(read(real_outputs, IBSTAT_A100))
    assert len(facts["cas"]) == 9
    ib = [ca for ca in facts["cas"] if ca["ports"][0]["link_layer"] == "InfiniBand"]
    assert len(ib) == 8
    assert {(ca["firmware_version"], ca["ports"][0]["rate_gbps"]) for ca in ib} == {("28.37.1014", 200)}
    eth = [ca for ca in facts["cas"] if ca["ports"][0]["link_layer"] == "Ethernet"]
    assert [ca["firmware_version"] for ca in eth] == ["22.35.2302"]
    assert all(ca["ports"][0]["state"] == "Active" for ca in facts["cas"])


def test_ibstat_spaces_trailing_blanks_and_ibpanic(real_outputs: Path):
    text = read(real_outputs, IBSTAT_H100)
    spaced = "\n".join(line.replace("\t", "    ") + "  " for line in text.splitlines())
    noisy = "ibpanic: [2034] main: stat of IB device 'mlx5_12' failed: No such file or directory\n" + spaced
    facts = parse_ibstat(noisy)
    assert facts["errors"] == ["ibpanic: [2034] main: stat of IB device 'mlx5_12' failed: No such file or directory"]
    assert facts["cas"] == parse_ibstat(text)["cas"]


def test_ibstat_only_an_error_line_is_still_ibstat():
    facts = parse_ibstat("ibpanic: [1234] main: can't find any IB device: No such file or directory\n")
    assert facts["cas"] == [] and len(facts["errors"]) == 1


def test_ibstat_rejects_other_text(real_outputs: Path):
    with pytest.raises(ParseError):
        parse_ibstat(read(real_outputs, DIAG))


IBV_DEVINFO = """hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tnode_guid:\t\t\t946d:ae03:00cd:e72c
\tsys_image_guid:\t\t\t946d:ae03:00cd:e72c
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4129
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000838
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t4096 (5)
\t\t\tsm_lid:\t\t\t334
\t\t\tport_lid:\t\t75
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tInfiniBand
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t100.0 Gbps (128)

hca_id:\tmlx5_1
\tfw_ver:\t\t\t\t22.38.1002
\tvendor_part_id:\t\t\t4125
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_DOWN (1)
\t\t\tlink_layer:\t\tEthernet
"""


def test_ibv_devinfo_verbose_and_plain_ports():
    facts = parse_ibv_devinfo(IBV_DEVINFO)
    first, second = facts["cas"]
    assert first["vendor_part_id"] == 4129 and first["firmware_version"] == "28.39.1002"
    assert first["board_id"] == "MT_0000000838"
    assert first["ports"] == [{"port": 1, "state": "Active", "rate_gbps": 400, "link_layer": "InfiniBand"}]
    assert second["ports"] == [{"port": 1, "state": "Down", "rate_gbps": None, "link_layer": "Ethernet"}]


def test_ibv_devinfo_error_and_rejection():
    assert parse_ibv_devinfo("Failed to get IB devices list: Function not implemented\n")["errors"]
    with pytest.raises(ParseError, match="not ibv_devinfo output"):
        parse_ibv_devinfo("hello\nworld\n")


# mlxfwmanager / mlxup / flint ------------------------------------------------------------------

def test_mlxfwmanager_inside_an_installer_log(real_outputs: Path):
    (device,) = parse_mlxfwmanager(read(real_outputs, MLXFW))["devices"]
    assert device == {"device_type": "ConnectX6DX", "part_number": "MCX623106AN-CDA_Ax", "psid": "MT_0000000359",
                      "pci": "d2:00.0", "firmware_current": "22.31.1014", "firmware_available": "22.33.1048",
                      "status": "Update required"}


MLXUP_TWO_DEVICES = """Querying Mellanox devices firmware ...

Device #1:
----------

  Device Type:      ConnectX7
  Part Number:      MCX75310AAS-NEA_Ax
  Description:      NVIDIA ConnectX-7 HHHL Adapter card; 400GbE / NDR IB (default mode); Single-port OSFP
  PSID:             MT_0000000838
  PCI Device Name:  /dev/mst/mt4129_pciconf0
  Base GUID:        946dae0300cde72c
  Versions:         Current        Available
     FW             28.39.1002     N/A
     PXE            3.7.0300       N/A

  Status:           No matching image found

Device #2:
----------

  Device Type:      ConnectX7
  Part Number:      MCX75310AAS-NEA_Ax
  PSID:             MT_0000000838
  PCI Device Name:  /dev/mst/mt4129_pciconf1
  Versions:         Current        Available
     FW             28.39.1002     28.39.1002

  Status:           Up to date
"""


def test_mlxup_two_devices_and_missing_image():
    first, second = parse_mlxfwmanager(MLXUP_TWO_DEVICES)["devices"]
    assert first["firmware_current"] == "28.39.1002" and first["firmware_available"] is None
    assert first["status"] == "No matching image found" and first["pci"] == "/dev/mst/mt4129_pciconf0"
    assert second["status"] == "Up to date" and second["firmware_available"] == "28.39.1002"


def test_mlxfwmanager_rejects_other_text(real_outputs: Path):
    with pytest.raises(ParseError):
        parse_mlxfwmanager(read(real_outputs, IBSTAT_A100))


FLINT_QUERY = """Image type:            FS4
FW Version:            28.39.1002
FW Release Date:       28.11.2023
Product Version:       28.39.1002
Rom Info:              type=UEFI version=14.32.17 cpu=AMD64,AARCH64
                       type=PXE version=3.7.300 cpu=AMD64
Description:           UID                GuidsNumber
Base GUID:             946dae0300cde72c        16
Base MAC:              946daecde72c            16
Image VSD:             N/A
Device VSD:            N/A
PSID:                  MT_0000000838
Security Attributes:   secure-fw
"""


def test_flint_query():
    (device,) = parse_flint(FLINT_QUERY)["devices"]
    assert device["firmware_current"] == "28.39.1002" and device["psid"] == "MT_0000000838"
    assert device["firmware_available"] is None and device["part_number"] is None
    with pytest.raises(ParseError, match="no 'FW Version:' line"):
        parse_flint("Image type: FS4\n")


# DCGM --------------------------------------------------------------------------------------------

def test_dcgmi_diag_all_pass(real_outputs: Path):
    facts = parse_dcgmi_diag(read(real_outputs, DIAG))
    assert facts["dcgm_version"] == "3.3.9" and facts["passed"] is True
    results = {test["name"]: test["result"] for test in facts["tests"]}
    assert results["EUD Test"] == "Skip"
    assert {result for name, result in results.items() if name != "EUD Test"} == {"Pass"}
    assert {"Denylist", "PCIe", "GPU Memory", "Diagnostic", "Targeted Stress", "Memory Bandwidth"} <= set(results)
    assert "Info" not in results and "DCGM Version" not in results


def test_dcgmi_diag_a_failure_fails_the_run(real_outputs: Path):
    text = read(real_outputs, DIAG).replace("| GPU Memory                | Pass - All",
                                               "| GPU Memory                | Fail - GPU: 0")
    facts = parse_dcgmi_diag(text)
    assert facts["passed"] is False
    assert {"name": "GPU Memory", "result": "Fail"} in facts["tests"]


def test_dcgm_exporter_metrics(real_outputs: Path):
    samples = parse_dcgm_metrics(read(real_outputs, METRICS))["samples"]
    names = {sample["name"] for sample in samples}
    assert len(names) == 23
    temperature = next(s for s in samples if s["name"] == "DCGM_FI_DEV_GPU_TEMP")
    assert temperature["value"] == 31
    assert temperature["labels"]["modelName"] == "NVIDIA L4"
    assert temperature["labels"]["DCGM_FI_DRIVER_VERSION"] == "580.105.08"
    remapped = [s for s in samples if "ROW_REMAP" in s["name"] or "REMAPPED" in s["name"]]
    assert remapped and all(s["value"] == 0 for s in remapped)
    # Counters keep the names the exporter writes (and Prometheus stores): no `_total` added.
    written = {line.split("{")[0] for line in read(real_outputs, METRICS).splitlines() if not line.startswith("#")}
    assert names == written - {""}
    assert {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"} <= names


def test_dcgm_metrics_rejects_other_text(real_outputs: Path):
    with pytest.raises(ParseError):
        parse_dcgm_metrics(read(real_outputs, MLXFW))


# provision inspect --------------------------------------------------------------------------------

def test_inspect_prints_the_documented_json(real_outputs: Path, capsys):
    assert main(["inspect", "nvidia-smi", str(real_outputs / H100_Q)]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert set(facts) == {"driver_version", "cuda_version", "gpus"}
    assert {"index", "name", "bus_id", "vbios_version", "ecc_errors", "remapped_rows"} <= set(facts["gpus"][0])


@pytest.mark.parametrize("kind", ["nvidia-smi", "ibstat", "ibv_devinfo", "mlxfwmanager", "flint", "dcgmi-diag",
                                  "dcgm-metrics"])
def test_inspect_wrong_input_is_a_one_line_error(kind: str, tmp_path: Path, capsys):
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("this is the output of some other program\n")
    assert main(["inspect", kind, str(wrong)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and "wrong.txt" in captured.err
