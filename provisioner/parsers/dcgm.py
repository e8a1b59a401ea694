"""DCGM: `dcgmi diag` result tables and dcgm-exporter's Prometheus metrics."""

from __future__ import annotations

import math
import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from provisioner.parsers.common import ParseError, clean_lines

METADATA = {"dcgm version", "driver version detected", "gpu device ids detected", "number of failed tests",
            "number of passed tests", "number of skipped tests", "number of warned tests"}
RESULT = re.compile(r"^(Pass|Fail|Skip|Warn|Not Run|Error)\b", re.I)


def parse_dcgmi_diag(text: str) -> dict[str, Any]:
    """Parse the result table of `dcgmi diag -r N [-v]`."""
    version = None
    tests: list[dict[str, str]] = []
    for line in clean_lines(text):
        stripped = line.strip()
        if not stripped.startswith("|") or stripped.count("|") < 3:
            continue
        cells = [cell.strip() for cell in stripped.strip("|").split("|")]
        name, result = cells[0], cells[1] if len(cells) > 1 else ""
        if not name or name.startswith("-") or name.lower() in ("info", "warning") or result.lower() == "result":
            continue
        if name.lower() == "dcgm version":
            version = result
            continue
        if name.lower() in METADATA:
            continue
        match = RESULT.match(result)
        if match:
            tests.append({"name": name, "result": match.group(1).capitalize()})
    if not tests:
        raise ParseError("not dcgmi diag output: no '| <test> | Pass/Fail/Skip |' rows")
    passed = not any(test["result"] in ("Fail", "Error") for test in tests)
    return {"dcgm_version": version, "tests": tests, "passed": passed}


def parse_dcgm_metrics(text: str) -> dict[str, Any]:
    """Parse dcgm-exporter's /metrics (Prometheus text format).

    Names are kept as the exporter wrote them, as Prometheus stores them: the client
    library's parser appends `_total` to counter samples (DCGM_FI_DEV_PCIE_REPLAY_COUNTER
    would become ..._COUNTER_total), which no query would find."""
    written = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines()
               if line.strip() and not line.startswith("#")}
    samples: list[dict[str, Any]] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                value = sample.value
                name = sample.name if sample.name in written else family.name
                samples.append({"name": name, "labels": dict(sample.labels),
                                "value": None if math.isnan(value) else value})
    except (ValueError, TypeError) as error:
        raise ParseError(f"not Prometheus metrics text: {error}") from error
    if not samples:
        raise ParseError("not dcgm-exporter metrics: no samples")
    return {"samples": samples}
