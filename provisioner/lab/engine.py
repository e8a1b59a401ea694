"""The Docker engine the lab runs on: find it, or install and start it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

WRAPPER = Path(__file__).resolve().parent / "files" / "runc-drop-sys-resource"
WRAPPER_RUNTIME = "lab-runc"
CAP_SYS_RESOURCE_BIT = 24


class EngineError(RuntimeError):
    """The Docker engine cannot be reached or started."""


def docker(*args: str, check: bool = True, capture: bool = True, timeout: float | None = 600,
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the docker CLI; raise EngineError with its stderr when `check` and it fails."""
    environment = {**os.environ, "DOCKER_BUILDKIT": "0", "DOCKER_CLI_HINTS": "false"}
    result = subprocess.run(
        ["docker", *args], capture_output=capture, text=True, timeout=timeout, input=stdin, env=environment,
        check=False,
    )
    if check and result.returncode != 0:
        message = (result.stderr or result.stdout or "").strip()
        raise EngineError(f"docker {' '.join(args[:3])} failed: {message}")
    return result


def host_lacks_sys_resource() -> bool:
    """True when CAP_SYS_RESOURCE is missing from this process's capability bounding set."""
    for status_line in Path("/proc/self/status").read_text().splitlines():
        if status_line.startswith("CapBnd:"):
            return not (int(status_line.split()[1], 16) >> CAP_SYS_RESOURCE_BIT) & 1
    return False


def engine_running() -> bool:
    if shutil.which("docker") is None:
        return False
    return docker("info", "--format", "{{.ServerVersion}}", check=False, timeout=30).returncode == 0


def _install_engine() -> None:
    if shutil.which("apt-get") is None:
        raise EngineError("no Docker engine (dockerd) and no apt-get to install one: install Docker first")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "docker.io"]):
        result = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
        if result.returncode != 0:
            raise EngineError(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")


def ensure_engine(log_dir: Path) -> str:
    """Make sure a Docker engine answers; start (and if needed install) dockerd. Returns a status line."""
    if engine_running():
        return "Docker engine already running"
    if shutil.which("dockerd") is None:
        _install_engine()
    log_dir.mkdir(parents=True, exist_ok=True)
    command = ["dockerd"]
    note = ""
    if host_lacks_sys_resource():
        command += [f"--add-runtime={WRAPPER_RUNTIME}={WRAPPER}", f"--default-runtime={WRAPPER_RUNTIME}"]
        note = " (with the runc wrapper: this host lacks CAP_SYS_RESOURCE)"
    log = (log_dir / "dockerd.log").open("ab")
    for _attempt in range(3):
        _remove_stale_pid_file()
        daemon = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and daemon.poll() is None:
            if engine_running():
                return f"Docker engine started{note}; log: {log_dir / 'dockerd.log'}"
            time.sleep(1)
        if daemon.poll() is None:
            break
        time.sleep(3)  # it exited at once: an engine that was stopping, or a stale pid file
    raise EngineError(f"dockerd did not start; see {log_dir / 'dockerd.log'}")


def _remove_stale_pid_file(path: Path = Path("/var/run/docker.pid")) -> None:
    """A pid file left by a dockerd that was killed blocks the next start; remove it if its process is gone."""
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
    except PermissionError:
        pass
