"""Run records: `runs/<timestamp>-<command>/` with events, runner artifacts and summary.json."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from provisioner.ansible.redact import Redactor

SUMMARY = "summary.json"
EVENTS = "events.jsonl"




def new_record_dir(base: Path, command: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base.mkdir(parents=True, exist_ok=True)
    candidate = base / f"{stamp}-{command}"
    suffix = 1
    while candidate.exists():
        suffix += 1
        candidate = base / f"{stamp}-{command}-{suffix}"
    candidate.mkdir(mode=0o700)
    candidate.chmod(0o700)  # whatever the umask: records hold hosts' outputs
    return candidate


def private_file(path: Path, mode: str = "a") -> IO:
    """A file readable by its owner only (0600) from its first byte, never through a link:
    appended to ("a"), or written anew ("w", "wb")."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o600), mode, encoding=None if "b" in mode else "utf-8")


def write_private(path: Path, content: str | bytes) -> Path:
    """Write a file anew, 0600 from its first byte (and 0600 if it existed)."""
    with private_file(path, "wb") as handle:
        handle.write(content.encode() if isinstance(content, str) else content)
    os.chmod(path, 0o600)
    return path


def make_private(tree: Path) -> None:
    """Folders 0700 and files 0600 under `tree` (what an archive unpacked into a record)."""
    for path in [tree, *tree.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o700 if path.is_dir() else 0o600)


class EventLog:
    """Appends redacted events as JSON lines."""

    def __init__(self, path: Path, redactor: Redactor):
        self._handle = private_file(path)
        self._redactor = redactor

    def write(self, event: dict[str, Any]) -> None:
        # Scrubbing the JSON text finds the secrets the way data() would (their JSON-escaped
        # form included) at a fraction of the cost of walking every event's structure.
        self._handle.write(self._redactor.text(json.dumps(event, default=str)) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def write_summary(record: Path, summary: dict[str, Any], redactor: Redactor) -> Path:
    return write_private(record / SUMMARY, json.dumps(redactor.data(summary), indent=2, default=str) + "\n")


def read_summary(record: Path) -> dict[str, Any]:
    return json.loads((record / SUMMARY).read_text(encoding="utf-8"))


def latest_record(base: Path, command: str, inventory_path: str) -> Path | None:
    """The newest record of `command` run against the inventory at `inventory_path`."""
    if not base.is_dir():
        return None
    candidates = sorted((p for p in base.iterdir() if (p / SUMMARY).is_file()), key=lambda p: p.name, reverse=True)
    for record in candidates:
        try:
            summary = read_summary(record)
        except ValueError:
            continue
        if summary.get("command") == command and summary.get("inventory_path") == inventory_path:
            return record
    return None
