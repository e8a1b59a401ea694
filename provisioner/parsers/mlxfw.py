"""NVIDIA/Mellanox firmware tools: `mlxfwmanager --query` / `mlxup` and `flint`/`mstflint query`."""

from __future__ import annotations

import re
from typing import Any

from provisioner.parsers.common import ParseError, clean_lines, key_value, text_or_none

DEVICE_HEADER = re.compile(r"^Device\s+#(\d+):\s*$")
FIELDS = {
    "device type": "device_type",
    "part number": "part_number",
    "psid": "psid",
    "pci device name": "pci",
    "status": "status",
}


def _empty_device() -> dict[str, Any]:
    return {"device_type": None, "part_number": None, "psid": None, "pci": None, "firmware_current": None,
            "firmware_available": None, "status": None}


def parse_mlxfwmanager(text: str) -> dict[str, Any]:
    """Parse `mlxfwmanager --query` (also inside an installer log) or `mlxup --query`."""
    devices: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in clean_lines(text):
        stripped = line.strip()
        if DEVICE_HEADER.match(stripped):
            # "Device #1: Updating FW ..." later in a log is not a new device section.
            current = _empty_device()
            devices.append(current)
            continue
        if current is None or not stripped:
            continue
        if stripped.startswith("---------") and current["status"] is not None:
            current = None
            continue
        versions = re.match(r"^FW\s+(\S+)(?:\s+(\S+))?\s*$", stripped)
        if versions:
            current["firmware_current"] = text_or_none(versions.group(1))
            current["firmware_available"] = text_or_none(versions.group(2))
            continue
        pair = key_value(stripped)
        if pair and pair[0].lower() in FIELDS:
            current[FIELDS[pair[0].lower()]] = text_or_none(pair[1])
            if pair[0].lower() == "status":
                current = None
    devices = [device for device in devices if any(value is not None for value in device.values())]
    if not devices:
        raise ParseError("not mlxfwmanager/mlxup output: no 'Device #N:' section with firmware fields")
    return {"devices": devices}


def parse_flint(text: str) -> dict[str, Any]:
    """Parse `flint -d DEV query` / `mstflint -d DEV query` (one device per output)."""
    device = _empty_device()
    found = False
    for line in clean_lines(text):
        pair = key_value(line.strip())
        if pair is None:
            continue
        key, value = pair[0].lower(), pair[1]
        if key == "fw version":
            device["firmware_current"] = text_or_none(value)
            found = True
        elif key == "psid":
            device["psid"] = text_or_none(value)
        elif key == "part number":
            device["part_number"] = text_or_none(value)
        elif key in ("device type", "device"):
            device["device_type"] = text_or_none(value)
        elif key in ("pci device", "pci device name"):
            device["pci"] = text_or_none(value)
    if not found:
        raise ParseError("not flint/mstflint query output: no 'FW Version:' line")
    return {"devices": [device]}
