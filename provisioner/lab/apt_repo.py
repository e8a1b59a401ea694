"""The lab's apt repository of stand-in NVIDIA packages, built with dpkg-deb.

The packages carry the real names (nvidia-driver, nvidia-smi, nvidia-fabricmanager,
datacenter-gpu-manager, datacenter-gpu-manager-exporter, doca-ofed) at several versions, so
that pinning, holding, upgrading and downgrading are done by real apt. The stand-in
nvidia-smi of each driver package reports that package's version. Built into `.lab/apt/`
(a flat repository: Packages, Release) and served on the lab network by a small HTTP
container; Molecule scenarios use it as a file: repository.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

PACKAGES_DIR = Path(__file__).resolve().parent / "packages"
REVISION = "1"
# Driver versions the repository offers, with the CUDA version each driver reports.
DRIVERS = {"535.161.08": "12.2", "550.54.15": "12.4"}
DCGM_VERSIONS = ("1:3.3.9", "1:3.3.8")
# dcgm-exporter releases, each paired with the DCGM it was built against.
DCGM_EXPORTER_VERSIONS = {"3.3.9-3.6.1-1": "1:3.3.9", "3.3.8-3.6.0-1": "1:3.3.8"}
# The exporter's shipped default collectors (the ECC, XID and violation fields are commented
# out there, as upstream ships them: a deployment has to enable them).
DCGM_EXPORTER_DEFAULT_COUNTERS = """# Format
# If line starts with a '#' it is considered a comment
# DCGM FIELD, Prometheus metric type, help message
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.
# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,   counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE,           gauge,   Whether remapping of rows has failed
"""
# CUDA toolkit releases of the CUDA repository: the nvcc/cudart package version and the NCCL
# built for that release (libnccl2, libnccl-dev), as NVIDIA's repository names them.
CUDA_TOOLKITS = {"12.2": ("12.2.140-1", "2.18.5-1+cuda12.2"), "12.4": ("12.4.131-1", "2.21.5-1+cuda12.4")}
# DOCA-OFED versions (the doca-ofed metapackage; `ofed_info -s` reports OFED-internal-<version>).
DOCA_OFED_VERSIONS = ("24.10-1.1.4", "24.07-0.6.1")
# What the metapackage pulls in: the RDMA user space, here Debian's (DOCA ships its own builds).
DOCA_OFED_DEPENDS = ["rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "perftest"]

OFED_INFO = """#!/bin/sh
# Lab stand-in for DOCA-OFED's ofed_info.
case "${1:-}" in
  -s) echo "OFED-internal-@VERSION@:" ;;
  -n) echo "@VERSION@" ;;
  *) printf 'OFED-internal-@VERSION@:\n\nInstalled Packages:\n-------------------\n' ;;
esac
"""

NVCC = """#!/bin/sh
# Lab stand-in for the CUDA compiler: answers --version as nvcc does; compiles nothing.
if [ "${1:-}" = --version ]; then
  printf 'nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2024 NVIDIA Corporation\n'
  printf 'Built on Tue_Feb_27_16:19:38_PST_2024\nCuda compilation tools, release @RELEASE@, V@BUILD@\n'
  printf 'Build cuda_@RELEASE@.r@RELEASE@/compiler.00000000_0\n'
  exit 0
fi
echo "nvcc (lab stand-in): there is no GPU code to build in the lab" >&2
exit 1
"""

NCCL_HEADER = """/* Lab stand-in for NCCL's header: the version macros only. */
#ifndef NCCL_H_
#define NCCL_H_
#define NCCL_MAJOR @MAJOR@
#define NCCL_MINOR @MINOR@
#define NCCL_PATCH @PATCH@
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE @CODE@
#endif
"""

LOAD_MODULE = """#!/bin/sh
# Lab stand-in for loading the nvidia kernel module: the first load after boot records the
# installed driver's version as the loaded one. A later upgrade leaves the old module
# loaded (nvidia-smi then reports a version mismatch) until the node reboots.
set -e
mkdir -p /run/nvidia-driver
[ -e /run/nvidia-driver/loaded-version ] || cp /usr/lib/nvidia/driver-version /run/nvidia-driver/loaded-version
"""

MODULE_UNIT = """[Unit]
Description=Load the NVIDIA kernel module (lab stand-in)
DefaultDependencies=no
After=local-fs.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/nvidia/lab-load-module

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER = """#!/bin/sh
# Lab stand-in for NVIDIA Fabric Manager: refuses a driver of another version, as the real one does.
loaded=$(cat /run/nvidia-driver/loaded-version 2>/dev/null || echo none)
if [ "$loaded" != "@VERSION@" ]; then
  echo "fabric manager @VERSION@ is not compatible with the loaded NVIDIA driver ($loaded)" >&2
  exit 1
fi
exec sleep infinity
"""

SERVICE = """[Unit]
Description={description}
After=nvidia-lab-module.service

[Service]
ExecStart={command}
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""


@dataclass
class Deb:
    """One stand-in package: control fields, files (path -> (content, mode)) and a postinst."""

    name: str
    version: str
    description: str
    depends: list[str] = field(default_factory=list)
    files: dict[str, tuple[str, int]] = field(default_factory=dict)
    postinst: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version.split(':')[-1]}_all.deb"


def _packages() -> list[Deb]:
    debs = []
    nvidia_smi = (PACKAGES_DIR / "nvidia-smi").read_text()
    dcgmi = (PACKAGES_DIR / "dcgmi").read_text()
    for driver, cuda in DRIVERS.items():
        version = f"{driver}-{REVISION}"
        debs.append(Deb("nvidia-smi", version, "NVIDIA System Management Interface (lab stand-in)", files={
            "/usr/bin/nvidia-smi": (nvidia_smi.replace("@DRIVER_VERSION@", driver).replace("@CUDA_VERSION@", cuda),
                                    0o755)}))
        debs.append(Deb(
            "nvidia-driver", version, "NVIDIA driver metapackage (lab stand-in)", depends=[f"nvidia-smi (= {version})"],
            files={"/usr/lib/nvidia/driver-version": (driver + "\n", 0o644),
                   "/usr/lib/nvidia/lab-load-module": (LOAD_MODULE, 0o755),
                   "/lib/systemd/system/nvidia-lab-module.service": (MODULE_UNIT, 0o644)},
            postinst="#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n"
                     "  systemctl enable nvidia-lab-module.service >/dev/null 2>&1 || true\n"
                     "  /usr/lib/nvidia/lab-load-module\nfi\n"))
        debs.append(Deb(
            "nvidia-fabricmanager", version, "NVIDIA Fabric Manager for NVSwitch systems (lab stand-in)",
            depends=[f"nvidia-driver (= {version})"],
            files={"/usr/bin/nv-fabricmanager": (FABRICMANAGER.replace("@VERSION@", driver), 0o755),
                   "/lib/systemd/system/nvidia-fabricmanager.service": (
                       SERVICE.format(description="NVIDIA fabric manager service (lab stand-in)",
                                      command="/usr/bin/nv-fabricmanager"), 0o644)}))
    for dcgm in DCGM_VERSIONS:
        debs.append(Deb(
            "datacenter-gpu-manager", dcgm, "NVIDIA Data Center GPU Manager (lab stand-in)",
            files={"/usr/bin/dcgmi": (dcgmi.replace("@DCGM_VERSION@", dcgm), 0o755),
                   "/usr/bin/nv-hostengine": ("#!/bin/sh\nexec sleep infinity\n", 0o755),
                   "/lib/systemd/system/nvidia-dcgm.service": (
                       SERVICE.format(description="NVIDIA DCGM host engine (lab stand-in)",
                                      command="/usr/bin/nv-hostengine"), 0o644)}))
    exporter = (PACKAGES_DIR / "dcgm-exporter").read_text()
    for version, dcgm in DCGM_EXPORTER_VERSIONS.items():
        debs.append(Deb(
            "datacenter-gpu-manager-exporter", version, "NVIDIA DCGM exporter for Prometheus (lab stand-in)",
            depends=[f"datacenter-gpu-manager (= {dcgm})"],
            files={"/usr/bin/dcgm-exporter": (exporter.replace("@VERSION@", version), 0o755),
                   "/etc/dcgm-exporter/default-counters.csv": (DCGM_EXPORTER_DEFAULT_COUNTERS, 0o644),
                   "/lib/systemd/system/nvidia-dcgm-exporter.service": (
                       SERVICE.format(description="NVIDIA DCGM exporter (lab stand-in)",
                                      command="/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv"),
                       0o644)}))
    for release, (toolkit, nccl) in CUDA_TOOLKITS.items():
        series = release.replace(".", "-")
        build = toolkit.split("-")[0]
        debs.append(Deb(f"cuda-nvcc-{series}", toolkit, f"CUDA nvcc {release} (lab stand-in)", files={
            f"/usr/local/cuda-{release}/bin/nvcc": (
                NVCC.replace("@RELEASE@", release).replace("@BUILD@", build), 0o755)}))
        debs.append(Deb(f"cuda-cudart-dev-{series}", toolkit, f"CUDA runtime {release} headers (lab stand-in)",
                        files={f"/usr/local/cuda-{release}/include/cuda_runtime.h": (
                            "/* Lab stand-in: no CUDA runtime in the lab. */\n", 0o644)}))
        major, minor, patch = (int(part) for part in nccl.split("-")[0].split("."))
        debs.append(Deb("libnccl2", nccl, "NVIDIA Collective Communication Library (lab stand-in)", files={
            "/usr/share/nccl-lab/version": (f"{major}.{minor}.{patch}+cuda{release}\n", 0o644)}))
        debs.append(Deb("libnccl-dev", nccl, "NCCL development files (lab stand-in)", depends=[f"libnccl2 (= {nccl})"],
                        files={"/usr/include/nccl.h": (
                            NCCL_HEADER.replace("@MAJOR@", str(major)).replace("@MINOR@", str(minor))
                            .replace("@PATCH@", str(patch)).replace("@CODE@", str(major * 10000 + minor * 100 + patch)),
                            0o644)}))
    for doca in DOCA_OFED_VERSIONS:
        debs.append(Deb("doca-ofed", doca, "DOCA-OFED metapackage: RDMA stack for ConnectX HCAs (lab stand-in)",
                        depends=DOCA_OFED_DEPENDS,
                        files={"/usr/bin/ofed_info": (OFED_INFO.replace("@VERSION@", doca), 0o755)}))
    return debs


def lab_cuda_packages(release: str) -> dict[str, str]:
    """certification_cuda_packages for one of the repository's CUDA releases."""
    toolkit, nccl = CUDA_TOOLKITS[release]
    series = release.replace(".", "-")
    return {f"cuda-nvcc-{series}": toolkit, f"cuda-cudart-dev-{series}": toolkit, "libnccl2": nccl, "libnccl-dev": nccl}


def recipe_hash() -> str:
    digest = hashlib.sha256()
    digest.update(Path(__file__).read_bytes())
    for path in sorted(PACKAGES_DIR.iterdir()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _build_deb(deb: Deb, pool: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="lab-deb-") as root_dir:
        root = Path(root_dir)
        (root / "DEBIAN").mkdir()
        control = [f"Package: {deb.name}", f"Version: {deb.version}", "Architecture: all",
                   "Maintainer: provision lab <lab@localhost>", "Section: non-free/libs", "Priority: optional"]
        if deb.depends:
            control.append(f"Depends: {', '.join(deb.depends)}")
        control.append(f"Description: {deb.description}")
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        if deb.postinst:
            (root / "DEBIAN" / "postinst").write_text(deb.postinst)
            (root / "DEBIAN" / "postinst").chmod(0o755)
        for path, (content, mode) in deb.files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(mode)
        output = pool / deb.filename
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(output)], check=True,
                       capture_output=True)
        return output


def _index_entry(deb: Deb, path: Path, relative: str) -> str:
    content = path.read_bytes()
    control = subprocess.run(["dpkg-deb", "--field", str(path)], check=True, capture_output=True,
                             text=True).stdout.strip()
    return (f"{control}\nFilename: {relative}\nSize: {len(content)}\nMD5sum: {hashlib.md5(content).hexdigest()}\n"
            f"SHA256: {hashlib.sha256(content).hexdigest()}\n")


def build_apt_repo(directory: Path) -> Path:
    """Build the repository into `directory` (once per recipe); return it."""
    stamp = directory / f".recipe-{recipe_hash()}"
    if stamp.exists():
        return directory
    # Empty the folder, never replace it: the repository container has it bind-mounted, and a
    # folder made anew would leave that mount on the deleted one.
    directory.mkdir(parents=True, exist_ok=True)
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    pool = directory / "pool"
    pool.mkdir(parents=True)
    entries = []
    for deb in _packages():
        path = _build_deb(deb, pool)
        entries.append(_index_entry(deb, path, f"./pool/{path.name}"))
    packages = "\n".join(entries)
    (directory / "Packages").write_text(packages)
    (directory / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    lines = ["Origin: provision-lab", "Label: provision-lab", "Suite: lab", "Codename: lab", "Architectures: all",
             f"Date: {datetime.now(UTC).strftime('%a, %d %b %Y %H:%M:%S UTC')}", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        content = (directory / name).read_bytes()
        lines.append(f" {hashlib.sha256(content).hexdigest()} {len(content)} {name}")
    (directory / "Release").write_text("\n".join(lines) + "\n")
    stamp.touch()
    return directory
