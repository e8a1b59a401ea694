"""Keep secrets out of logs and run records: scrub the values of secret-named variables."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MASK = "********"
SECRET_NAME = re.compile(r"(password|passwd|passphrase|secret|token|api_key|apikey|munge_key|private_key$|"
                         r"webhook_url|auth_key|credential)", re.IGNORECASE)
MIN_SECRET_LENGTH = 4
# Variables holding structures in which some plain-named keys are secrets: alert receivers'
# URLs (Slack and webhook URLs carry their token) and passwords.
SECRET_KEYS_WITHIN = {"monitoring_alert_receivers": {"url", "auth_password"}}


def secret_values(hostvars: dict[str, dict[str, Any]]) -> set[str]:
    """Every string value held under a secret-looking variable name, at any depth."""
    found: set[str] = set()

    def walk(value: Any, secret: bool, secret_keys: frozenset[str] = frozenset()) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                within = secret_keys | SECRET_KEYS_WITHIN.get(str(key), set())
                walk(item, secret or bool(SECRET_NAME.search(str(key))) or str(key) in secret_keys,
                     frozenset(within))
        elif isinstance(value, list):
            for item in value:
                walk(item, secret, secret_keys)
        elif secret and isinstance(value, str | int) and not isinstance(value, bool):
            text = str(value)
            if len(text) >= MIN_SECRET_LENGTH:
                found.add(text)

    for variables in hostvars.values():
        walk(variables, False)
    return found


class Redactor:
    """Replaces known secret values in text and nested data."""

    def __init__(self, secrets: Iterable[str]):
        values = sorted({s for s in secrets if s}, key=len, reverse=True)
        forms = set(values) | {json.dumps(v)[1:-1] for v in values}
        self._pattern = re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))) \
            if forms else None

    def text(self, value: str) -> str:
        return self._pattern.sub(MASK, value) if self._pattern else value

    def data(self, value: Any) -> Any:
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value

    def files(self, directory: Path) -> None:
        """Scrub every text file under `directory` in place."""
        if self._pattern is None:
            return
        for path in directory.rglob("*"):
            if not path.is_file():
                continue
            try:
                content = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            scrubbed = self.text(content)
            if scrubbed != content:
                path.write_text(scrubbed, encoding="utf-8")
