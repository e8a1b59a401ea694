"""The operator's known_hosts entry of a node whose machine was replaced (a new SSH host key)."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class KnownHostsError(RuntimeError):
    """The new machine's host key could not be read."""


def known_hosts_file(hostvars: dict[str, Any]) -> Path:
    """The file Ansible checks this host's key against: UserKnownHostsFile in its SSH arguments, or ~/.ssh/."""
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        for argument in shlex.split(str(hostvars.get(key) or "")):
            found = re.match(r"UserKnownHostsFile=(\S+)", argument)
            if found:
                return Path(found.group(1)).expanduser()
    return Path("~/.ssh/known_hosts").expanduser()


@dataclass(frozen=True)
class HostKey:
    """One SSH host key a machine presents: `type base64` and its fingerprint (SHA256:...)."""

    key: str
    fingerprint: str
    kind: str

    def __str__(self) -> str:
        return f"{self.fingerprint} ({self.kind})"


def scan(node: str, address: str, port: int = 22) -> list[HostKey]:
    """The host keys the machine at address:port presents now."""
    scan = subprocess.run(["ssh-keyscan", "-T", "10", "-p", str(port), "-t", "ed25519,ecdsa,rsa", "--", address],
                          capture_output=True, text=True, timeout=60, check=False)
    keys = [line.split(None, 1)[1] for line in scan.stdout.splitlines() if line and not line.startswith("#")]
    if not keys:
        raise KnownHostsError(f"{node} ({address} port {port}) presented no SSH host key: "
                              f"{scan.stderr.strip()[-300:]}")
    return [host_key for host_key in map(described, keys) if host_key is not None]


def described(key: str) -> HostKey | None:
    """A public key (`type base64`) with its SHA256 fingerprint, as ssh-keygen -l prints it."""
    listed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", "-"], input=f"{key}\n",
                            capture_output=True, text=True, check=False).stdout.split()
    return HostKey(key, listed[1], listed[-1].strip("()")) if len(listed) >= 2 else None


def chosen(keys: list[HostKey], accepted: str) -> list[HostKey]:
    """The presented keys the operator's fingerprint names (SHA256:... with or without its prefix)."""
    wanted = accepted.strip().removeprefix("SHA256:")
    return [key for key in keys if key.fingerprint.removeprefix("SHA256:") == wanted]


def record(path: Path, node: str, address: str, keys: list[HostKey], port: int = 22) -> None:
    """Forget every key recorded for the node's name and address, then record these keys."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=True)
    names = [node, address] if port == 22 else [f"[{node}]:{port}", f"[{address}]:{port}"]
    for name in names:
        subprocess.run(["ssh-keygen", "-R", name, "-f", str(path)], capture_output=True, check=False)
    Path(f"{path}.old").unlink(missing_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for key in keys:
            handle.write(f"{','.join(reversed(names))} {key.key}\n")
