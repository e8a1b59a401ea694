"""Helpers shared by the parsers."""

from __future__ import annotations

import re

NOT_AVAILABLE = {"n/a", "[n/a]", "not supported", "[not supported]", "unknown", "[unknown error]", ""}


class ParseError(ValueError):
    """The text is not the output of the tool the parser reads."""


def clean_lines(text: str) -> list[str]:
    """Lines with tabs expanded and trailing spaces removed (formats drift between versions)."""
    return [line.expandtabs(8).rstrip() for line in text.replace("\r\n", "\n").split("\n")]


def key_value(line: str) -> tuple[str, str] | None:
    """`  Key name   : value` -> ("Key name", "value"); None when the line has no colon."""
    if ":" not in line:
        return None
    key, value = line.split(":", 1)
    return key.strip(), value.strip()


def integer_or_none(value: str | None) -> int | None:
    if value is None or value.strip().lower() in NOT_AVAILABLE:
        return None
    match = re.match(r"^\s*(-?\d+)", value)
    return int(match.group(1)) if match else None


def number_or_none(value: str | None) -> float | int | None:
    if value is None or value.strip().lower() in NOT_AVAILABLE:
        return None
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", value)
    if not match:
        return None
    number = float(match.group(1))
    return int(number) if number.is_integer() else number


def yes_no_or_none(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("yes", "true", "enabled", "active"):
        return True
    if lowered in ("no", "false", "disabled", "not active"):
        return False
    return None


def text_or_none(value: str | None) -> str | None:
    if value is None or value.strip().lower() in NOT_AVAILABLE:
        return None
    return value.strip()
