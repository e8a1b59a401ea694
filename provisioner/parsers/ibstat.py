"""ibstat and ibv_devinfo: HCAs, firmware, ports (state, rate, link layer) and error lines."""

from __future__ import annotations

import re
from typing import Any

from provisioner.parsers.common import ParseError, clean_lines, integer_or_none, key_value, number_or_none

CA_HEADER = re.compile(r"^CA\s+'([^']+)'\s*$")
PORT_HEADER = re.compile(r"^Port\s+(\d+):\s*$")
ERROR_LINE = re.compile(r"^(ibpanic|ibwarn|ibstat|ibv_devinfo|ibv_devices|ERROR|Failed|No IB devices)\b", re.I)
STATES = {
    "active": "Active", "port_active": "Active", "down": "Down", "port_down": "Down", "init": "Init",
    "initializing": "Init", "initialize": "Init", "port_init": "Init", "armed": "Armed", "port_armed": "Armed",
    "polling": "Polling", "port_active_defer": "Active",
}


def normalise_state(value: str | None) -> str | None:
    """'Active', 'PORT_ACTIVE (4)', '4: ACTIVE' -> 'Active'; unknown states are kept as they are."""
    if value is None:
        return None
    word = re.sub(r"\s*\(\d+\)\s*$", "", value.strip())
    word = re.sub(r"^\d+:\s*", "", word)
    return STATES.get(word.lower(), word)


def _split_errors(text: str) -> tuple[list[str], list[str]]:
    """(content lines, error lines) of a tool's output, both stripped, blank lines dropped."""
    content, errors = [], []
    for line in clean_lines(text):
        stripped = line.strip()
        if stripped:
            (errors if ERROR_LINE.match(stripped) else content).append(stripped)
    return content, errors


def parse_ibstat(text: str) -> dict[str, Any]:
    """Parse `ibstat` (all CAs)."""
    cas: list[dict[str, Any]] = []
    port: dict[str, Any] | None = None
    declared: dict[int, int | None] = {}  # CA index -> its "Number of ports"
    lines, errors = _split_errors(text)
    for stripped in lines:
        if match := CA_HEADER.match(stripped):
            cas.append({"name": match.group(1), "ca_type": None, "firmware_version": None, "node_guid": None,
                        "ports": []})
            port = None
            continue
        if not cas:
            continue
        if match := PORT_HEADER.match(stripped):
            port = {"port": int(match.group(1)), "state": None, "physical_state": None, "rate_gbps": None,
                    "link_layer": None, "base_lid": None, "sm_lid": None}
            cas[-1]["ports"].append(port)
            continue
        pair = key_value(stripped)
        if pair is None:
            continue
        key, value = pair[0].lower(), pair[1]
        if port is not None and key in ("state", "physical state", "rate", "link layer", "base lid", "sm lid"):
            if key == "state":
                port["state"] = normalise_state(value)
            elif key == "physical state":
                port["physical_state"] = value
            elif key == "rate":
                port["rate_gbps"] = number_or_none(value)
            elif key in ("base lid", "sm lid"):
                port[key.replace(" ", "_")] = integer_or_none(value)
            else:
                port["link_layer"] = value
        elif key == "ca type":
            cas[-1]["ca_type"] = value
        elif key == "firmware version":
            cas[-1]["firmware_version"] = value
        elif key == "node guid":
            cas[-1]["node_guid"] = value
        elif key == "number of ports":
            declared[len(cas) - 1] = integer_or_none(value)
    if not cas and not errors:
        raise ParseError("not ibstat output: no \"CA '<name>'\" section")
    for index, count in declared.items():
        if count is not None and count != len(cas[index]["ports"]):
            raise ParseError(f"truncated ibstat output: CA '{cas[index]['name']}' declares {count} ports but "
                             f"{len(cas[index]['ports'])} are listed")
    return {"cas": cas, "errors": errors}


def _rate(width: str | None, speed: str | None) -> float | int | None:
    """ibv_devinfo -v: active_width '4X (2)' x active_speed '100.0 Gbps (128)' = 400."""
    lanes = integer_or_none(width)
    per_lane = number_or_none(speed)
    if lanes is None or per_lane is None:
        return None
    total = lanes * per_lane
    return int(total) if float(total).is_integer() else round(total, 2)


def parse_ibv_devinfo(text: str) -> dict[str, Any]:
    """Parse `ibv_devinfo` (with or without -v)."""
    cas: list[dict[str, Any]] = []
    port: dict[str, Any] | None = None
    widths: dict[int, tuple[str | None, str | None]] = {}
    lines, errors = _split_errors(text)
    for stripped in lines:
        pair = key_value(stripped)
        if pair is None:
            continue
        key, value = pair[0].lower(), pair[1]
        if key == "hca_id":
            cas.append({"name": value, "vendor_part_id": None, "firmware_version": None, "node_guid": None,
                        "board_id": None, "ports": []})
            port = None
            continue
        if not cas:
            continue
        if key == "port":
            port = {"port": int(value), "state": None, "rate_gbps": None, "link_layer": None}
            cas[-1]["ports"].append(port)
            widths[id(port)] = (None, None)
        elif port is not None and key in ("state", "link_layer", "active_width", "active_speed"):
            if key == "state":
                port["state"] = normalise_state(value)
            elif key == "link_layer":
                port["link_layer"] = value
            else:
                width, speed = widths[id(port)]
                widths[id(port)] = (value, speed) if key == "active_width" else (width, value)
                port["rate_gbps"] = _rate(*widths[id(port)])
        elif key == "fw_ver":
            cas[-1]["firmware_version"] = value
        elif key == "vendor_part_id":
            cas[-1]["vendor_part_id"] = integer_or_none(value)
        elif key == "node_guid":
            cas[-1]["node_guid"] = value
        elif key == "board_id":
            cas[-1]["board_id"] = value
    if not cas and not errors:
        raise ParseError("not ibv_devinfo output: no 'hca_id:' line")
    return {"cas": cas, "errors": errors}
