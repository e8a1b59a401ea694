"""nccl-tests output (all_reduce_perf, all_gather_perf, ...): the table of sizes and bandwidths.

Reads the formats nccl-tests has printed over the years: with or without the `redop` and
`root` columns (legacy all_gather/broadcast-style tables have neither: 11 fields a row),
`#wrong` counts or the legacy `error` column (`N/A` there becomes null), the
`Collective test starting` line of newer versions or none. Lines that are not table rows
(NCCL INFO logs, warnings, "Reducing maxBytes ...") may appear anywhere and are skipped.
"""

from __future__ import annotations

import re
from typing import Any

from provisioner.parsers.common import ParseError, clean_lines

_COLLECTIVE = re.compile(r"^#\s*Collective test starting:\s*(\w+?)(_perf)?\s*$")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\b")
_VERSIONS = re.compile(r"^#\s*nccl-tests version\s+(\S+)(?:.*\bnccl-library=(\d+))?")
_NCCL_INFO_VERSION = re.compile(r"\bNCCL INFO NCCL version\s+(\S+)")
_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_HEADER = re.compile(
    r"^#\s+size\s+count\s+type\s+(?P<redop>redop\s+)?(?P<root>root\s+)?time\s+algbw\s+busbw\s+(#wrong|error)\s+time")
# Bytes per element of nccl-tests' type names.
_TYPE_SIZES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2, "float": 4,
               "double": 8, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}


def _number(text: str) -> float | None:
    return None if text.upper() == "N/A" else float(text)


def _wrong(text: str) -> int | None:
    if text.upper() == "N/A":
        return None
    return int(float(text))


def _result(fields: list[str]) -> dict[str, Any]:
    time_us, algbw, busbw, wrong = fields
    return {"time_us": _number(time_us), "algbw_gbps": _number(algbw), "busbw_gbps": _number(busbw),
            "wrong": _wrong(wrong)}


def _row(tokens: list[str], columns: tuple[bool, bool]) -> dict[str, Any] | None:
    """A table row of a table with (redop, root) columns or not, or None for any other line."""
    has_redop, has_root = columns
    offset = 3 + has_redop + has_root
    if len(tokens) != offset + 8 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    try:
        row = {"size_bytes": int(tokens[0]), "count": int(tokens[1]), "dtype": tokens[2],
               "redop": tokens[3] if has_redop else "none",
               "out_of_place": _result(tokens[offset:offset + 4]), "in_place": _result(tokens[offset + 4:offset + 8])}
        if has_root:
            row["root"] = int(tokens[offset - 1])
    except ValueError:
        return None
    return row


def _infer_collective(rows: list[dict[str, Any]], ranks: int) -> str:
    """The collective of output that does not name it, from the rows' shape (nccl-tests
    prints count per rank and size as count x element size, times ranks for gathers)."""
    row = next((r for r in rows if r["count"] > 0), None)
    if row is None:
        return "unknown"
    element = _TYPE_SIZES.get(row["dtype"], 0)
    root = row.get("root", -1)
    reduces = row["redop"] != "none"
    if root >= 0:
        return "reduce" if reduces else "broadcast"
    if row["size_bytes"] == row["count"] * element:
        return "all_reduce" if reduces else "sendrecv"
    if ranks and row["size_bytes"] == row["count"] * element * ranks:
        return "reduce_scatter" if reduces else "all_gather"
    return "unknown"


def _version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE -> '2.18.5' (major*10000+minor*100+patch since 2.9, major*1000 before)."""
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def parse_nccl_tests(text: str) -> dict[str, Any]:
    """The documented JSON of `provision inspect nccl-tests`."""
    collective: str | None = None
    ranks: dict[int, str] = {}
    columns: tuple[bool, bool] | None = None  # (redop, root) once the table header is seen
    rows: list[dict[str, Any]] = []
    average: float | None = None
    out_of_bounds: int | None = None
    tests_version: str | None = None
    logged: str | None = None  # NCCL's INFO line
    coded: str | None = None  # nccl-tests' header
    for line in clean_lines(text):
        stripped = line.strip()
        if logged is None and (match := _NCCL_INFO_VERSION.search(stripped)):
            logged = match.group(1)
        if stripped.startswith("#"):
            if match := _VERSIONS.match(stripped):
                tests_version = match.group(1)
                if match.group(2):
                    coded = _version_from_code(int(match.group(2)))
            elif match := _COLLECTIVE.match(stripped):
                collective = match.group(1)
            elif match := _RANK.match(stripped):
                ranks[int(match.group(1))] = match.group(2)
            elif match := _HEADER.match(stripped):
                columns = (bool(match.group("redop")), bool(match.group("root")))
            elif match := _AVERAGE.match(stripped):
                average = float(match.group(1))
            elif match := _OUT_OF_BOUNDS.match(stripped):
                out_of_bounds = int(match.group(1))
            continue
        if columns is None:
            continue
        row = _row(stripped.split(), columns)
        if row is not None:
            rows.append(row)
    if columns is None or not rows:
        raise ParseError("not nccl-tests output: no size/count/type/redop/time/algbw/busbw table")
    if average is None:
        raise ParseError(f"truncated nccl-tests output: the table stops after {len(rows)} sizes with no "
                         "'# Avg bus bandwidth' line (the run ended early or the output was cut)")
    hosts = list(dict.fromkeys(ranks[rank] for rank in sorted(ranks)))
    busbw = [result["busbw_gbps"] for row in rows for result in (row["out_of_place"], row["in_place"])
             if result["busbw_gbps"] is not None]
    collective = collective or _infer_collective(rows, len(ranks))
    for row in rows:
        row.pop("root", None)
    return {
        "collective": collective,
        "ranks": len(ranks),
        "hosts": hosts,
        "dtype": rows[0]["dtype"],
        "rows": rows,
        "avg_busbw_gbps": average,
        "peak_busbw_gbps": max(busbw) if busbw else None,
        "out_of_bounds": out_of_bounds,
        "nccl_tests_version": tests_version,
        # The NCCL library the test ran with: NCCL's own INFO line (with its CUDA build) where
        # NCCL_DEBUG=INFO logged it, else the version code nccl-tests prints in its header.
        "nccl_version": logged or coded,
    }
