"""`provision inspect nccl-tests`: every nccl-tests format of the real outputs in shared/fixtures."""

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


def test_current_format_h100(shared_fixtures: Path):
    facts = parse_nccl_tests(_read(shared_fixtures, H100))
    assert (facts["collective"], facts["ranks"], facts["hosts"], facts["dtype"]) == ("all_reduce", 8, ["cnode3-002"],
                                                                                  "double")
    assert [row["size_bytes"] for row in facts["rows"]] == [2 ** n for n in range(25, 35)]
    assert facts["rows"][-1] == {"size_bytes": 17179869184, "count": 2147483648, "dtype": "double", "redop": "sum",
                                 "out_of_place": {"time_us": 62340.7, "algbw_gbps": 275.58, "busbw_gbps": 482.27,
                                                  "wrong": 0},
                                 "in_place": {"time_us": 62359.0, "algbw_gbps": 275.5, "busbw_gbps": 482.12,
                                              "wrong": 0}}
    assert (facts["avg_busbw_gbps"], facts["peak_busbw_gbps"], facts["out_of_bounds"]) == (437.957, 482.27, 0)


def test_two_nodes_sixteen_ranks_with_root_column(shared_fixtures: Path):
    facts = parse_nccl_tests(_read(shared_fixtures, TWO_NODES))
    assert facts["ranks"] == 16
    assert facts["hosts"] == ["nccl-allreduce-job0-mpiworker-0", "nccl-allreduce-job0-mpiworker-1"]
    assert facts["collective"] == "all_reduce"  # inferred: this version does not name it
    assert len(facts["rows"]) == 31 and facts["rows"][0]["size_bytes"] == 8
    assert (facts["avg_busbw_gbps"], facts["peak_busbw_gbps"], facts["out_of_bounds"]) == (66.4834, 237.94, 0)
    assert all(row["out_of_place"]["wrong"] == 0 and row["in_place"]["wrong"] == 0 for row in facts["rows"])


def test_legacy_format_with_a_log_line_inside_the_table(shared_fixtures: Path):
    facts = parse_nccl_tests(_read(shared_fixtures, LEGACY))
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


def test_inspect_prints_the_json_and_refuses_other_text(shared_fixtures: Path, capsys):
    assert main(["inspect", "nccl-tests", str(shared_fixtures / H100)]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert set(facts) == {"collective", "ranks", "hosts", "dtype", "rows", "avg_busbw_gbps", "peak_busbw_gbps",
                          "out_of_bounds"}
    assert main(["inspect", "nccl-tests", str(shared_fixtures / "ibstat" /
                                              "ibstat_h100_cx7_ndr400_ib_3ports_down.txt")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "not nccl-tests output" in captured.err


def test_empty_text_is_not_nccl_tests_output():
    with pytest.raises(ParseError):
        parse_nccl_tests("# nThread 1 nGpus 8\n")
