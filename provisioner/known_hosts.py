"""The operator's known_hosts entry of a node whose machine was replaced (a new SSH host key)."""

from __future__ import annotations

import re
import shlex
import subprocess
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


def refresh(path: Path, node: str, address: str, port: int = 22) -> list[str]:
    """Forget every key recorded for the node's name and address, then record the keys the machine
    now presents (trust on first use, as for any new machine); returns their fingerprints."""
    scan = subprocess.run(["ssh-keyscan", "-T", "10", "-p", str(port), "-t", "ed25519,ecdsa,rsa", address],
                          capture_output=True, text=True, timeout=60, check=False)
    keys = [line.split(None, 1)[1] for line in scan.stdout.splitlines() if line and not line.startswith("#")]
    if not keys:
        raise KnownHostsError(f"{node} ({address}) presented no SSH host key: {scan.stderr.strip()[-300:]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=True)
    names = [node, address] if port == 22 else [f"[{node}]:{port}", f"[{address}]:{port}"]
    for name in names:
        subprocess.run(["ssh-keygen", "-R", name, "-f", str(path)], capture_output=True, check=False)
    Path(f"{path}.old").unlink(missing_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for key in keys:
            handle.write(f"{','.join(reversed(names))} {key}\n")
    fingerprints = subprocess.run(["ssh-keygen", "-l", "-f", "-"], input="".join(f"{address} {k}\n" for k in keys),
                                  capture_output=True, text=True, check=False)
    return [" ".join(line.split()[:2] + line.split()[-1:]) for line in fingerprints.stdout.splitlines()]
