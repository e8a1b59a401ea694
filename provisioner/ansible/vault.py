"""Ansible Vault on the control node: the run's vault secrets, and decryption in memory only.

The secrets are the ones ansible-playbook itself is given: the files named by
ANSIBLE_VAULT_PASSWORD_FILE and ANSIBLE_VAULT_IDENTITY_LIST (`id@file`, comma-separated;
an executable file is run and its output taken, as Ansible does). Without them nothing is
decrypted here: validation then reads an encrypted file's variable names as unknown, and
the run record redactor knows only the secrets written in the clear.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

VAULT_HEADER = "$ANSIBLE_VAULT;"


def is_vault_text(text: str) -> bool:
    return text.lstrip().startswith(VAULT_HEADER)


def is_vault_file(path: Path) -> bool:
    """Whether the file is encrypted whole with Ansible Vault."""
    try:
        with path.open("rb") as handle:
            return is_vault_text(handle.read(64).decode("ascii", errors="replace"))
    except OSError:
        return False


def _sources() -> list[tuple[str, str]]:
    sources: list[tuple[str, str]] = []
    for item in filter(None, (part.strip() for part in os.environ.get("ANSIBLE_VAULT_IDENTITY_LIST", "").split(","))):
        vault_id, _, path = item.rpartition("@")
        sources.append((vault_id or "default", path))
    for path in filter(None, os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE", "").split(",")):
        sources.append(("default", path.strip()))
    return [(vault_id, os.path.expanduser(path)) for vault_id, path in sources if path != "prompt"]


@cache
def _vault():  # type: ignore[no-untyped-def]
    """ansible's VaultLib holding the run's secrets, or None without any."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import VaultLib, get_file_vault_secret

    secrets = []
    for vault_id, path in _sources():
        try:
            secret = get_file_vault_secret(filename=path, vault_id=vault_id, loader=DataLoader())
            secret.load()
        except (AnsibleError, OSError):
            continue
        secrets.append((vault_id, secret))
    return VaultLib(secrets) if secrets else None


def decrypt(ciphertext: str) -> str | None:
    """The plain text of a vault blob, or None when no secret at hand opens it."""
    vault = _vault()
    if vault is None:
        return None
    from ansible.errors import AnsibleError

    try:
        return vault.decrypt(ciphertext.strip().encode()).decode("utf-8")
    except (AnsibleError, UnicodeDecodeError, ValueError):
        return None


def forget_secrets() -> None:
    """Drop the cached secrets (tests that change the environment)."""
    _vault.cache_clear()
