"""Keep secrets out of logs and run records: scrub the values of secret-named variables.

A secret is known by its variable's name (password, token, munge key, webhook URL, `*_pass`,
`*_pw`, `vault_*`...), by its place (the alert receivers' URLs and passwords), by being
Vault-encrypted (decrypted here, in memory only, with the run's vault secrets), by being
what a secret's template refers to (`"{{ vault_x }}"` makes vault_x's value a secret), or by
sitting in a URL's credentials (`scheme://user:password@host`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from provisioner.ansible.vault import decrypt
from provisioner.inventory.yaml_source import VaultValue

MASK = "********"
SECRET_NAME = re.compile(r"(password|passwd|passphrase|secret|token|api_key|apikey|munge_key|private_key$|"
                         r"webhook_url|auth_key|credential|_pass$|_pw$|^vault_)", re.IGNORECASE)
# Shorter secrets are scrubbed only where they stand alone (not inside a longer word or number).
SHORT_SECRET = 6
# Variables holding structures in which some plain-named keys are secrets: alert receivers'
# URLs (Slack and webhook URLs carry their token) and passwords.
SECRET_KEYS_WITHIN = {"monitoring_alert_receivers": {"url", "auth_password"}}
URL_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/\s:@]+):([^/\s@]+)@")
TEMPLATE_NAME = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*(?:\|[^}]*)?\}\}")


def _plain(value: Any) -> str | None:
    """A secret's text: a vault value decrypted, numbers as written; None for what holds none."""
    if isinstance(value, VaultValue):
        return decrypt(value.ciphertext)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return str(value)


def secret_values(hostvars: dict[str, dict[str, Any]]) -> set[str]:
    """Every secret value in the variables, at any depth (see the module's docstring)."""
    found: set[str] = set()
    referred: set[str] = set()

    def add(text: str) -> None:
        if text.strip() and "{{" not in text:
            found.add(text)
        referred.update(TEMPLATE_NAME.findall(text))

    def walk(value: Any, secret: bool, secret_keys: frozenset[str] = frozenset()) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                within = secret_keys | SECRET_KEYS_WITHIN.get(str(key), set())
                walk(item, secret or bool(SECRET_NAME.search(str(key))) or str(key) in secret_keys,
                     frozenset(within))
            return
        if isinstance(value, list):
            for item in value:
                walk(item, secret, secret_keys)
            return
        text = _plain(value)
        if text is None:
            return
        if secret or isinstance(value, VaultValue):
            add(text)
        for user, password in URL_CREDENTIALS.findall(text):
            add(password)
            add(f"{user}:{password}")

    for variables in hostvars.values():
        walk(variables, False)
    # What secrets' templates name is secret too ("{{ vault_slack_url }}"), to any depth.
    done: set[str] = set()
    while referred - done:
        name = (referred - done).pop()
        done.add(name)
        for variables in hostvars.values():
            if name in variables:
                walk(variables[name], True)
    return found


class Redactor:
    """Replaces known secret values in text and nested data."""

    def __init__(self, secrets: Iterable[str]):
        values = sorted({s for s in secrets if s}, key=len, reverse=True)
        forms = {form for value in values for form in (value, json.dumps(value)[1:-1])}
        alternatives = []
        for form in sorted(forms, key=len, reverse=True):
            escaped = re.escape(form)
            alternatives.append(escaped if len(form) >= SHORT_SECRET else rf"(?<![\w.-]){escaped}(?![\w.-])")
        self._pattern = re.compile("|".join(alternatives)) if alternatives else None

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
            if path.is_symlink() or not path.is_file():
                continue
            try:
                content = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            scrubbed = self.text(content)
            if scrubbed != content:
                path.write_text(scrubbed, encoding="utf-8")
