"""Lab node images, built without any registry and cached by the hash of their recipe.

`provision-lab-base:<hash>` is a Debian 12 root filesystem made by debootstrap and imported
into Docker; `provision-lab-node:<hash>` adds the node set-up (systemd, SSH, the `provision`
user with sudo) and the stand-in vendor tools. Each is rebuilt only when its recipe changes.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from provisioner.lab.engine import EngineError, docker

SUITE = "bookworm"
BASE_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "openssh-server", "sudo", "iproute2",
    "procps", "ca-certificates", "iputils-ping", "kmod", "gnupg", "less",
)
STANDINS_DIR = Path(__file__).resolve().parent / "standins"
NODE_REPOSITORY = "provision-lab-node"
BASE_REPOSITORY = "provision-lab-base"
NODE_IMAGE = f"{NODE_REPOSITORY}:latest"

NODE_SETUP = r"""#!/bin/sh
set -eu
useradd --create-home --shell /bin/bash provision
printf 'provision ALL=(ALL) NOPASSWD:ALL\n' > /etc/sudoers.d/provision
chmod 0440 /etc/sudoers.d/provision
rm -f /etc/ssh/ssh_host_*
cat > /etc/ssh/sshd_config.d/lab.conf <<'EOF'
# Lab node: host key and the lab's authorized key come from the lab (mounted read-only).
HostKey /etc/ssh/lab/ssh_host_ed25519_key
AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/lab/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UseDNS no
EOF
systemctl enable ssh.service
systemctl mask getty@tty1.service console-getty.service systemd-udevd.service systemd-udevd-kernel.socket \
  systemd-udevd-control.socket systemd-remount-fs.service sys-kernel-config.mount sys-kernel-debug.mount \
  systemd-firstboot.service systemd-logind.service
truncate -s 0 /etc/machine-id
mkdir -p /var/lib/lab-hw /etc/ssh/lab
install -m 0755 /tmp/standins/lab-hw-tool /usr/local/sbin/lab-hw-tool
for tool in ibstat ibv_devinfo mlxfwmanager mlxup flint mstflint; do
  ln -s lab-hw-tool /usr/local/sbin/$tool
done
# The GPU device files a GPU node's driver makes at boot (character devices with NVIDIA's major
# number, one per GPU of the node's simulated hardware): made again at every boot, since /dev
# is new with every start of the container.
cat > /usr/local/sbin/lab-gpu-devices <<'SCRIPT'
#!/usr/bin/python3
# Make /dev/nvidia<i> and /dev/nvidiactl for the GPUs of /var/lib/lab-hw/state.json.
import json
import os
import stat

MAJOR, CONTROL_MINOR = 195, 255
with open("/var/lib/lab-hw/state.json", encoding="utf-8") as handle:
    gpus = len(json.load(handle).get("gpus", []))
for name, minor in [(f"nvidia{i}", i) for i in range(gpus)] + ([("nvidiactl", CONTROL_MINOR)] if gpus else []):
    path = f"/dev/{name}"
    if not os.path.exists(path):
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(MAJOR, minor))
        os.chmod(path, 0o666)
SCRIPT
chmod 0755 /usr/local/sbin/lab-gpu-devices
cat > /etc/systemd/system/lab-gpu-devices.service <<'UNIT'
[Unit]
Description=Lab: make the GPU device files of the node's simulated GPUs
DefaultDependencies=no
ConditionPathExists=/var/lib/lab-hw/state.json
After=local-fs.target
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/lab-gpu-devices

[Install]
WantedBy=sysinit.target
UNIT
systemctl enable lab-gpu-devices.service
rm -rf /tmp/standins /tmp/node-setup.sh
apt-get clean
"""


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def base_recipe_hash() -> str:
    return _digest(SUITE.encode(), " ".join(BASE_PACKAGES).encode())


def node_recipe_hash() -> str:
    standins = [path.name.encode() + path.read_bytes() for path in sorted(STANDINS_DIR.iterdir())]
    return _digest(base_recipe_hash().encode(), NODE_SETUP.encode(), *standins)


def image_exists(reference: str) -> bool:
    return docker("image", "inspect", reference, check=False, timeout=60).returncode == 0


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (debootstrap fetches from it)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[0] == "deb" and "security" not in fields[1]:
                return next(f for f in fields[1:] if f.startswith("http"))
    return "http://deb.debian.org/debian"


def _ensure_debootstrap() -> None:
    if shutil.which("debootstrap"):
        return
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "debootstrap"]):
        subprocess.run(command, check=True, capture_output=True)


def build_base_image(log: callable) -> str:
    reference = f"{BASE_REPOSITORY}:{base_recipe_hash()}"
    if image_exists(reference):
        return reference
    _ensure_debootstrap()
    log(f"building {reference} with debootstrap (about a minute, once)")
    with tempfile.TemporaryDirectory(prefix="lab-rootfs-") as rootfs:
        result = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, rootfs,
             debian_mirror()],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            raise EngineError(f"debootstrap failed: {(result.stdout + result.stderr).strip()[-800:]}")
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["docker", "import", "-", reference], stdin=tar.stdout, capture_output=True,
                                  text=True, check=False)
        tar.wait()
        if imported.returncode != 0:
            raise EngineError(f"docker import failed: {imported.stderr.strip()}")
    return reference


def build_node_image(log: callable) -> str:
    """Build (or reuse) the node image; tag it `provision-lab-node:latest` too."""
    base = build_base_image(log)
    reference = f"{NODE_REPOSITORY}:{node_recipe_hash()}"
    if not image_exists(reference):
        log(f"building {reference}")
        with tempfile.TemporaryDirectory(prefix="lab-node-") as context:
            context_dir = Path(context)
            shutil.copytree(STANDINS_DIR, context_dir / "standins")
            (context_dir / "node-setup.sh").write_text(NODE_SETUP)
            (context_dir / "Dockerfile").write_text(
                f"FROM {base}\n"
                "COPY standins /tmp/standins\n"
                "COPY node-setup.sh /tmp/node-setup.sh\n"
                "RUN sh /tmp/node-setup.sh\n"
                'CMD ["/lib/systemd/systemd"]\n'
            )
            docker("build", "--quiet", "--label", "provision.lab=image", "-t", reference, str(context_dir))
    docker("tag", reference, NODE_IMAGE)
    return reference
