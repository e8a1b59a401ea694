"""The certification's summary and page on a simulated 256-node fleet: the failing nodes first with
their evidence and the commands that take them out, a terminal that shows only that, a page within
its size budget whose charts do not grow a line per node."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from provisioner.certify import report, report_html
from provisioner.certify.summary import print_summary, summarise
from tests.simulated_certification import simulated_document

# The page of a 256-node certification stays under this (docs/certify.md).
BUDGET_256_BYTES = 1_500_000


@pytest.fixture(scope="module")
def fleet() -> dict:
    return simulated_document(256)


def test_the_summary_names_each_failing_node_with_its_evidence_and_what_to_do(fleet: dict):
    summary = summarise(fleet)
    assert summary["verdict"] == "NOT CERTIFIED" and summary["nodes"] == 256 and summary["certified_nodes"] == 253
    failing = {failure["node"]: failure for failure in summary["failed_nodes"]}
    assert set(failing) == {"gpu042", "gpu118", "gpu205"}
    slow = failing["gpu118"]["checks"]
    assert any("intra-node busbw" in c["name"] and c["evidence"].startswith("measured 234.6 GB/s against 445.7 GB/s")
               and "fleet median 469.140 GB/s; +50.0% below it" in c["evidence"] for c in slow), slow
    assert any(c["id"] == "nccl-tests.localised.node.gpu205" and "with known-good gpu001" in c["evidence"]
               for c in failing["gpu205"]["checks"])
    assert failing["gpu042"]["actions"][0].startswith("provision drain gpu042 -i sim --reason 'certify: training.")
    assert failing["gpu042"]["actions"][1].startswith("provision replace-node gpu042 -i sim")
    assert any("rank 331 on gpu042" in line for line in summary["ranks"])


def test_the_terminal_shows_the_summary_and_the_failures_only(fleet: dict):
    console = Console(record=True, width=120)
    print_summary(console, summarise(fleet), "runs/x/certification.html")
    text = console.export_text()
    assert text.startswith("NOT CERTIFIED: sim, 253 of 256 nodes certified")
    assert "provision drain gpu118 -i sim" in text and "every check: --verbose" in text
    # no passing node, no passing check; gpu001 only as the partner of gpu205's slow pair
    assert not any(line.startswith(("gpu001", "pass")) for line in text.splitlines())
    assert "certified" not in text.split("\n", 1)[1] and len(text.splitlines()) < 40


def test_the_page_reads_summary_first_and_stays_within_its_budget(fleet: dict, tmp_path: Path):
    page = report_html.write_html(tmp_path / "certification.html", fleet).read_text()
    assert len(page.encode()) < BUDGET_256_BYTES
    order = [page.index(marker) for marker in ("NOT CERTIFIED", "<h2>Failures</h2>", "<h2>Nodes by check</h2>",
                                               "<h2>Communication</h2>", "<h2>Smoke training</h2>",
                                               "<h2>Rounds</h2>", "<h2>Checks</h2>")]
    assert order == sorted(order)
    # one row per node in the map, the certified ones folded at this size
    assert page.count("<tr class='ok' data-nodes=") == 253 and page.count("<tr class='bad' data-nodes=") == 3
    assert "The 253 certified nodes are folded" in page
    # no cell says None; the passing checks summarised by kind
    assert ">None<" not in page and "passing checks, by kind" in page
    # self-contained: nothing loaded from anywhere (the http names left are XML namespaces)
    assert not re.search(r"<link|<img|\bsrc=|href=\"http|url\((?!#)|@import", page)
    # the outliers named on the strip of each node's busbw, not a line per node
    assert "gpu118</text>" in page


def test_a_thousand_nodes_still_make_a_page_of_a_few_megabytes(tmp_path: Path):
    page = report_html.write_html(tmp_path / "c.html", simulated_document(1024)).read_text()
    assert len(page.encode()) < 4 * BUDGET_256_BYTES


def test_json_and_junit_keep_their_content(fleet: dict, tmp_path: Path):
    report.write_json(tmp_path / "c.json", fleet)
    suites = ET.parse(report.write_junit(tmp_path / "c.xml", fleet)).getroot()
    failures = {s.get("name"): int(s.get("failures")) for s in suites}
    assert len(failures) == 257 and {n for n, count in failures.items() if count and n != "fleet"} == {
        "gpu042", "gpu118", "gpu205"}
