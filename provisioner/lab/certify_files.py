"""What the lab's repository serves for the certification role: a wheelhouse and nccl-tests.

Real air-gapped clusters install PyTorch from a wheelhouse and build nccl-tests from a
release tarball on a local mirror; the lab does the same through its repository container
(http://repo:8080). The wheelhouse is downloaded once on this machine (`pip download` of the
role's pins) and cached beside the lab; the nccl-tests tarball is the lab's stand-in source
tree (provisioner/lab/nccl-tests-src), whose build leaves an all_reduce_perf that runs on CPUs.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from provisioner.lab.engine import EngineError
from provisioner.paths import role_defaults

NCCL_TESTS_SOURCE = Path(__file__).with_name("nccl-tests-src")
NCCL_TESTS_TARBALL = "nccl-tests-lab.tar.gz"
WHEELHOUSE = "wheels"


def role_pins() -> list[str]:
    """The certification role's pinned packages (its defaults: one list for the lab and production)."""
    return list(role_defaults("certification")["certification_pip_packages"])


def build_wheelhouse(cache: Path, log=print) -> Path:
    """Download the role's pins and their dependencies into `cache` (once per pin set)."""
    pins = role_pins()
    stamp = cache / (".pins-" + "-".join(p.replace("==", "_") for p in pins))
    if stamp.exists():
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    log(f"downloading the certification wheelhouse ({', '.join(pins)}), once")
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:",
                             "--dest", str(cache), *pins], capture_output=True, text=True)
    if result.returncode != 0:
        raise EngineError(f"pip download of the certification wheelhouse failed: {result.stderr.strip()[-800:]}")
    stamp.touch()
    return cache


def nccl_tests_version() -> str:
    """The stand-in's version: NVIDIA's release it mimics, and its own source's digest (nodes
    build into a folder per version, so a changed stand-in is built again)."""
    digest = hashlib.sha256()
    for path in sorted(NCCL_TESTS_SOURCE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.name.encode() + path.read_bytes())
    return f"2.17.8+lab.{digest.hexdigest()[:8]}"


def nccl_tests_tarball() -> bytes:
    """The stand-in nccl-tests source tree as a release tarball (one top folder, as GitHub's)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(NCCL_TESTS_SOURCE.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            info = archive.gettarinfo(str(path), arcname=f"nccl-tests-lab/{path.relative_to(NCCL_TESTS_SOURCE)}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            if path.is_file():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


def publish(repo_dir: Path, cache: Path, log=print) -> None:
    """Put the wheelhouse and the nccl-tests tarball where the lab repository serves them."""
    wheels = build_wheelhouse(cache, log)
    target = repo_dir / WHEELHOUSE
    target.mkdir(parents=True, exist_ok=True)
    for wheel in wheels.glob("*.whl"):
        if not (target / wheel.name).exists():
            try:
                (target / wheel.name).hardlink_to(wheel)
            except OSError:
                shutil.copy2(wheel, target / wheel.name)
    # Replaced whole, and only when it changed: a Molecule scenario may be reading it.
    tarball, content = repo_dir / NCCL_TESTS_TARBALL, nccl_tests_tarball()
    if not tarball.exists() or tarball.read_bytes() != content:
        staging = tarball.with_name(tarball.name + ".new")
        staging.write_bytes(content)
        staging.replace(tarball)
