"""`provision inspect nccl-tests`: every nccl-tests format of the real outputs in tests/fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.parsers import ParseError, parse_nccl_tests

H100 = "nccl/all_reduce_h100_1node_8gpu_nccltests2.17.8.txt"
TWO_NODES = "nccl/all_reduce_a100_sxm4_40gb_oci_2node_16rank.txt"
LEGACY = "nccl/all_reduce_a100_sxm4_40gb_1node_8gpu_legacy_format.txt"


def _read(fixtures: Path, name: str) -> str:
    return (fixtures / name).read_text()


def test_current_format_h100(real_outputs: Path):
    facts = parse_nccl_tests(_read(real_outputs, H100))
    assert (facts["collective"], facts["ranks"], facts["hosts"], facts["dtype"]) == ("all_reduce", 8, ["cnode3-002"],
                                                                                  "double")
    assert [row["size_bytes"] for row in facts["rows"]] == [2 ** n for n in range(25, 35)]
    assert facts["rows"][-1] == {"size_bytes": 17179869184, "count": 2147483648, "dtype": "double", "redop": "sum",
                                 "out_of_place": {"time_us": 62340.7, "algbw_gbps": 275.58, "busbw_gbps": 482.27,
                                                  "wrong": 0},
                                 "in_place": {"time_us": 62359.0, "algbw_gbps": 275.5, "busbw_gbps": 482.12,
                                              "wrong": 0}}
    assert (facts["avg_busbw_gbps"], facts["peak_busbw_gbps"], facts["out_of_bounds"]) == (437.957, 482.27, 0)
    assert (facts["nccl_tests_version"], facts["nccl_version"]) == ("2.17.8", "2.29.2")  # nccl-library=22902


def test_two_nodes_sixteen_ranks_with_root_column(real_outputs: Path):
    facts = parse_nccl_tests(_read(real_outputs, TWO_NODES))
    assert facts["ranks"] == 16
    assert facts["hosts"] == ["nccl-allreduce-job0-mpiworker-0", "nccl-allreduce-job0-mpiworker-1"]
    assert facts["collective"] == "all_reduce"  # inferred: this version does not name it
    assert len(facts["rows"]) == 31 and facts["rows"][0]["size_bytes"] == 8
    assert (facts["avg_busbw_gbps"], facts["peak_busbw_gbps"], facts["out_of_bounds"]) == (66.4834, 237.94, 0)
    assert facts["nccl_version"] is None  # neither a version header nor NCCL's INFO log
    assert all(row["out_of_place"]["wrong"] == 0 and row["in_place"]["wrong"] == 0 for row in facts["rows"])


def test_legacy_format_with_a_log_line_inside_the_table(real_outputs: Path):
    facts = parse_nccl_tests(_read(real_outputs, LEGACY))
    assert facts["ranks"] == 8 and facts["hosts"] == ["localhost"] and facts["collective"] == "all_reduce"
    assert len(facts["rows"]) == 34  # two size-0 rows, then 4 B .. 8 GiB; the NCCL INFO line skipped
    assert facts["rows"][0]["size_bytes"] == 0 and facts["rows"][0]["out_of_place"]["wrong"] is None
    assert (facts["avg_busbw_gbps"], facts["peak_busbw_gbps"]) == (68.4048, 235.26)


def test_wrong_values_and_an_all_gather_are_read():
    text = """# nThread 1 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#  Rank  0 Group  0 Pid  1 on node-a device  0 [0x0f] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  2 on node-b device  0 [0x0f] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        1024           128     float    none      -1    20.00    0.05    0.03      0    19.00    0.05    0.03      3
node-a:11:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE
        2048           256     float    none      -1    21.00    0.10    0.05      0    20.00    0.10    0.05      0
# Out of bounds values : 3 FAILED
# Avg bus bandwidth    : 0.04
"""
    facts = parse_nccl_tests(text)
    assert facts["collective"] == "all_gather" and facts["hosts"] == ["node-a", "node-b"]
    assert facts["rows"][0]["in_place"]["wrong"] == 3 and facts["out_of_bounds"] == 3
    assert len(facts["rows"]) == 2
    logged = parse_nccl_tests("# nccl-tests version 2.13.8 nccl-headers=21805 nccl-library=21805\n"
                              "node-a:11:11 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\n" + text)
    assert (logged["nccl_tests_version"], logged["nccl_version"]) == ("2.13.8", "2.18.5+cuda12.2")
    assert parse_nccl_tests("# nccl-tests version 2.13.8 nccl-headers=21805 nccl-library=21805\n" + text)[
        "nccl_version"] == "2.18.5"
    assert parse_nccl_tests("# nccl-tests version 2.0.0 nccl-headers=2708 nccl-library=2708\n" + text)[
        "nccl_version"] == "2.7.8"


def test_inspect_prints_the_json_and_refuses_other_text(real_outputs: Path, capsys):
    assert main(["inspect", "nccl-tests", str(real_outputs / H100)]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert set(facts) == {"collective", "ranks", "hosts", "dtype", "rows", "avg_busbw_gbps", "peak_busbw_gbps",
                          "out_of_bounds", "nccl_tests_version", "nccl_version"}
    assert main(["inspect", "nccl-tests", str(real_outputs / "ibstat" /
                                              "ibstat_h100_cx7_ndr400_ib_3ports_down.txt")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "not nccl-tests output" in captured.err


def test_empty_text_is_not_nccl_tests_output():
    with pytest.raises(ParseError):
        parse_nccl_tests("# nThread 1 nGpus 8\n")


_LEGACY_RANKS = "".join(f"#   Rank  {rank} Pid  4242 on dgx-a100-03 device  {rank} [0x07] A100-SXM4-40GB\n"
                        for rank in range(8))
# An older nccl-tests' all_gather_perf: neither a redop nor a root column, the error column.
LEGACY_ALL_GATHER = """# nThread 1 nGpus 8 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
""" + _LEGACY_RANKS + """#
#                                             out-of-place                       in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576         32768   float    45.20   23.20   20.30  0e+00    44.10   23.78   20.81  0e+00
dgx-a100-03:4242:4250 [0] NCCL INFO Launch mode Parallel
     2097152         65536   float    61.05   34.35   30.06    N/A    60.72   34.54   30.22    N/A
     4194304        131072   float    92.31   45.44   39.76  0e+00    91.88   45.65   39.94  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 30.1817
#
"""


def test_legacy_all_gather_table_without_redop_or_root_columns():
    facts = parse_nccl_tests(LEGACY_ALL_GATHER)
    assert (facts["collective"], facts["ranks"], facts["hosts"]) == ("all_gather", 8, ["dgx-a100-03"])
    assert [row["size_bytes"] for row in facts["rows"]] == [1048576, 2097152, 4194304]
    assert facts["rows"][0] == {"size_bytes": 1048576, "count": 32768, "dtype": "float", "redop": "none",
                                "out_of_place": {"time_us": 45.2, "algbw_gbps": 23.2, "busbw_gbps": 20.3, "wrong": 0},
                                "in_place": {"time_us": 44.1, "algbw_gbps": 23.78, "busbw_gbps": 20.81, "wrong": 0}}
    assert facts["rows"][1]["out_of_place"]["wrong"] is None  # the legacy N/A
    assert (facts["avg_busbw_gbps"], facts["peak_busbw_gbps"], facts["out_of_bounds"]) == (30.1817, 39.94, 0)


def test_legacy_broadcast_table_with_root_but_no_redop():
    text = LEGACY_ALL_GATHER.replace("count    type     time", "count    type   root     time")
    text = "\n".join(line.replace("   float ", "   float      0 ") if line.startswith("     ") else line
                     for line in text.splitlines())
    facts = parse_nccl_tests(text)
    assert facts["collective"] == "broadcast" and len(facts["rows"]) == 3
    assert facts["rows"][2]["in_place"]["busbw_gbps"] == 39.94


def test_inspect_reads_a_legacy_all_gather(tmp_path: Path, capsys):
    path = tmp_path / "all_gather.log"
    path.write_text(LEGACY_ALL_GATHER)
    assert main(["inspect", "nccl-tests", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["collective"] == "all_gather"
