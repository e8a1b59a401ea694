"""fio's JSON output (`--output-format=json`, or `json+normal`): per direction the bytes moved,
the bandwidth and the run time, and each job's error.

fio may print other lines around its JSON (a job's header, "Starting N processes", warnings,
the normal report after it with json+normal): the first top-level object that holds "jobs" is
read. Plain standard library: the certification's driver bundles it.
"""

from __future__ import annotations

import json
from typing import Any

from provisioner.parsers.common import ParseError

DIRECTIONS = ("read", "write")


def _report(text: str) -> dict[str, Any]:
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict) and "jobs" in value:
            return value
        start = text.find("\n{", start + 1)
        start = start + 1 if start != -1 else -1
    raise ParseError("no fio JSON report (run with --output-format=json)")


def parse_fio_json(text: str) -> dict[str, Any]:
    """{"version", "jobs": [{name, error, read: {...}, write: {...}}], "read": {...}, "write": {...}}:
    each direction's io_bytes, bw_bytes (bytes/s) and runtime_ms, summed over the jobs (with
    --group_reporting fio reports one job for the group already)."""
    return fio_report(_report(text))


def fio_report(report: dict[str, Any]) -> dict[str, Any]:
    """The facts of fio's JSON report already decoded (as the launcher embeds it in its line)."""
    jobs = report.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ParseError("fio report without jobs")
    parsed = []
    try:
        for job in jobs:
            entry: dict[str, Any] = {"name": str(job["jobname"]), "error": int(job.get("error", 0))}
            for direction in DIRECTIONS:
                figures = job[direction]
                entry[direction] = {"io_bytes": int(figures["io_bytes"]), "bw_bytes": int(figures["bw_bytes"]),
                                    "runtime_ms": int(figures["runtime"])}
            parsed.append(entry)
    except (KeyError, TypeError, ValueError) as error:
        raise ParseError(f"fio job without {error}") from error
    totals = {direction: {"io_bytes": sum(job[direction]["io_bytes"] for job in parsed),
                          "bw_bytes": sum(job[direction]["bw_bytes"] for job in parsed),
                          "runtime_ms": max(job[direction]["runtime_ms"] for job in parsed)}
              for direction in DIRECTIONS}
    return {"version": str(report.get("fio version", "")), "jobs": parsed, **totals,
            "errors": [job["name"] for job in parsed if job["error"]]}
