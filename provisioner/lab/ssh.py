"""SSH into the lab as Ansible does into real nodes: the lab's key, its known hosts (strict
checking), the unprivileged `provision` user."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provisioner.lab.layout import LAB_USER, node_dir
from provisioner.paths import lab_dir


def keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)


def ssh_args(address: str) -> list[str]:
    directory = lab_dir()
    return [
        "ssh", "-i", str(directory / "ssh" / "id_ed25519"), "-o", f"UserKnownHostsFile={directory / 'known_hosts'}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
        "--", f"{LAB_USER}@{address}",
    ]


def ssh_reachable(address: str) -> bool:
    result = subprocess.run([*ssh_args(address), "sudo", "-n", "true"], capture_output=True, check=False,
                            timeout=30)
    return result.returncode == 0


def host_key_fingerprint(node: str) -> str:
    """A lab machine's ed25519 host key fingerprint as its console shows it (ssh-keygen -lf):
    what an operator checks before `replace-node --accept-new-host-key`."""
    listed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f",
                             str(node_dir(node) / "ssh" / "ssh_host_ed25519_key.pub")],
                            capture_output=True, text=True, check=True)
    return listed.stdout.split()[1]


def write_known_hosts(addresses: dict[str, str]) -> None:
    lines = []
    for node, address in addresses.items():
        key = (node_dir(node) / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"{address},{node} {key[0]} {key[1]}")
    (lab_dir() / "known_hosts").write_text("\n".join(lines) + "\n")
