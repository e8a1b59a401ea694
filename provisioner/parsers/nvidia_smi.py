"""nvidia-smi: the `-q` report (every ECC layout) and `--query-gpu=... --format=csv`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from provisioner.parsers.common import (
    ParseError,
    clean_lines,
    integer_or_none,
    key_value,
    number_or_none,
    text_or_none,
    yes_no_or_none,
)

GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


@dataclass
class _Node:
    """One line of the indented report: a label, its value (if any) and the lines nested under it."""

    label: str
    value: str | None
    children: list[_Node] = field(default_factory=list)

    def child(self, *labels: str) -> _Node | None:
        node: _Node | None = self
        for label in labels:
            if node is None:
                return None
            node = next((c for c in node.children if c.label.lower() == label.lower()), None)
        return node

    def value_of(self, *labels: str) -> str | None:
        node = self.child(*labels)
        return node.value if node is not None else None


def _tree(lines: list[str]) -> list[_Node]:
    """Build the label tree of one GPU section from its indentation."""
    roots: list[_Node] = []
    stack: list[tuple[int, _Node]] = []
    for line in lines:
        if not line.strip() or line.strip() in ("...", "[...]"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        pair = key_value(line)
        node = _Node(pair[0], pair[1]) if pair and pair[1] != "" else _Node(line.strip().rstrip(":"), None)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((indent, node))
    return roots


def _ecc_counts(scope: _Node | None) -> dict[str, int | None]:
    """Correctable / uncorrectable totals of one scope (Volatile or Aggregate), any layout.

    Newer drivers split SRAM and DRAM (and SRAM parity vs SEC-DED); older ones report
    Single Bit / Double Bit with a Total. Counts are summed; N/A everywhere gives null.
    """
    if scope is None:
        return {"correctable": None, "uncorrectable": None}
    single = scope.child("Single Bit")
    double = scope.child("Double Bit")
    if single is not None or double is not None:
        return {
            "correctable": integer_or_none(single.value_of("Total")) if single else None,
            "uncorrectable": integer_or_none(double.value_of("Total")) if double else None,
        }
    totals: dict[str, int | None] = {"correctable": None, "uncorrectable": None}
    for counter in scope.children:
        label = counter.label.lower()
        if "threshold" in label or counter.value is None:
            continue
        kind = "uncorrectable" if "uncorrectable" in label else "correctable" if "correctable" in label else None
        count = integer_or_none(counter.value)
        if kind is None or count is None:
            continue
        totals[kind] = (totals[kind] or 0) + count
    return totals


def _gpu(index: int, bus_id: str, section: list[_Node]) -> dict[str, Any]:
    root = _Node("GPU", None, section)
    ecc = root.child("ECC Errors")
    remapped = root.child("Remapped Rows")
    return {
        "index": index,
        "name": text_or_none(root.value_of("Product Name")),
        "bus_id": bus_id,
        "uuid": text_or_none(root.value_of("GPU UUID")),
        "serial": text_or_none(root.value_of("Serial Number")),
        "minor_number": integer_or_none(root.value_of("Minor Number")),
        "vbios_version": text_or_none(root.value_of("VBIOS Version")),
        "ecc_errors": {
            "volatile": _ecc_counts(ecc.child("Volatile") if ecc else None),
            "aggregate": _ecc_counts(ecc.child("Aggregate") if ecc else None),
        },
        "remapped_rows": {
            "correctable": integer_or_none(remapped.value_of("Correctable Error")) if remapped else None,
            "uncorrectable": integer_or_none(remapped.value_of("Uncorrectable Error")) if remapped else None,
            "pending": yes_no_or_none(remapped.value_of("Pending")) if remapped else None,
            "failure": yes_no_or_none(remapped.value_of("Remapping Failure Occurred")) if remapped else None,
        },
    }


def parse_nvidia_smi_q(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi -q`."""
    lines = clean_lines(text)
    header: dict[str, str] = {}
    sections: list[tuple[str, list[str]]] = []
    for line in lines:
        match = GPU_HEADER.match(line.strip()) if not line.startswith(" ") else None
        if match:
            sections.append((match.group(1), []))
        elif sections and (line.startswith(" ") or not line.strip()):
            sections[-1][1].append(line)
        elif (pair := key_value(line)) is not None and not line.startswith(" "):
            header[pair[0].lower()] = pair[1]
    if "driver version" not in header and not sections:
        raise ParseError("not nvidia-smi -q output: no 'Driver Version' line and no 'GPU <bus id>' section")
    attached = integer_or_none(header.get("attached gpus", ""))
    if attached is not None and attached != len(sections):
        raise ParseError(f"truncated nvidia-smi -q output: 'Attached GPUs : {attached}' but {len(sections)} GPU "
                         "sections")
    trees = [_tree(body) for _, body in sections]
    if len(trees) > 1 and len(trees[-1]) < len(trees[0]):
        raise ParseError(f"truncated nvidia-smi -q output: the last GPU's section has {len(trees[-1])} "
                         f"of the {len(trees[0])} entries the first has")
    gpus = [_gpu(index, bus_id, tree) for index, ((bus_id, _), tree) in enumerate(zip(sections, trees, strict=True))]
    return {
        "driver_version": text_or_none(header.get("driver version")),
        "cuda_version": text_or_none(header.get("cuda version")),
        "gpus": gpus,
    }


def parse_nvidia_smi_csv(text: str, fields: list[str] | None = None) -> dict[str, Any]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`.

    With a header, field names come from it (units in brackets are dropped from the names
    and from the values). With `noheader`, pass the queried `fields`.
    """
    rows = [line for line in clean_lines(text) if line.strip()]
    if not rows:
        raise ParseError("not nvidia-smi CSV output: no lines")
    units: list[str | None]
    if fields is None:
        names = [cell.strip() for cell in rows[0].split(",")]
        if not all(re.fullmatch(r"[a-z_.]+( \[[^\]]+\])?", name) for name in names):
            raise ParseError(f"not nvidia-smi CSV output: header {rows[0]!r} is not a list of query fields")
        units = [re.search(r"\[([^\]]+)\]", name).group(1) if "[" in name else None for name in names]
        fields = [name.split(" [")[0] for name in names]
        rows = rows[1:]
    else:
        units = [None] * len(fields)
    gpus = []
    for row in rows:
        cells = [cell.strip() for cell in row.split(",")]
        if len(cells) != len(fields):
            raise ParseError(f"nvidia-smi CSV row has {len(cells)} values for {len(fields)} fields: {row!r}")
        record: dict[str, Any] = {}
        for name, unit, cell in zip(fields, units, cells, strict=True):
            value = cell[: -len(unit)].strip() if unit and cell.endswith(unit) else cell
            numeric = re.fullmatch(r"-?\d+(\.\d+)?", value) and not name.endswith("version")
            number = number_or_none(value) if numeric else None
            record[name] = number if number is not None else text_or_none(value)
        gpus.append(record)
    return {"gpus": gpus}
