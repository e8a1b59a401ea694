"""The Molecule scenarios' platforms started and removed with the docker CLI in one step.

The scenarios keep Molecule's docker driver (its inventory: `community.docker.docker`
connections to containers named after the platforms); only its create and destroy playbooks
are replaced (create.yml, destroy.yml beside this file). Those ran a dozen Ansible tasks on
the control machine per scenario, about 24 s of a 48 s scenario; `docker run` with the
platform's options does the same in a few seconds.

Usage: platforms.py create|destroy, the scenario's platforms (molecule_yml.platforms) as JSON
on standard input. Only the platform keys the scenarios use are known; any other is refused."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from typing import Any

KNOWN = {"name", "hostname", "image", "pre_build_image", "privileged", "cgroupns_mode", "volumes", "tmpfs",
         "command", "groups", "docker_networks", "networks"}
LABEL = "owner=molecule"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        sys.exit(f"docker {' '.join(args)}: {result.stderr.strip()}")
    return result


def network_names(platforms: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(network["name"] for platform in platforms
                              for network in platform.get("docker_networks", [])))


def run_argv(platform: dict[str, Any]) -> list[str]:
    """`docker run` for one platform, as the docker driver's docker_container task would start it."""
    argv = ["run", "--detach", "--name", platform["name"], "--hostname", platform.get("hostname", platform["name"]),
            "--label", LABEL, "--log-driver", "json-file"]
    if platform.get("privileged"):
        argv.append("--privileged")
    if platform.get("cgroupns_mode"):
        argv += ["--cgroupns", platform["cgroupns_mode"]]
    for volume in platform.get("volumes", []):
        argv += ["--volume", volume]
    for path in platform.get("tmpfs", []):
        argv += ["--tmpfs", path]
    networks = [network["name"] for network in platform.get("networks", [])]
    if networks:
        argv += ["--network", networks[0]]
    argv.append(platform["image"])
    if platform.get("command"):
        argv += shlex.split(platform["command"])
    return argv


def create(platforms: list[dict[str, Any]]) -> None:
    for name in network_names(platforms):
        if docker("network", "inspect", name, check=False).returncode != 0:
            docker("network", "create", "--label", LABEL, name)
    for platform in platforms:
        docker("rm", "--force", platform["name"], check=False)
        docker(*run_argv(platform))
        for network in platform.get("networks", [])[1:]:
            docker("network", "connect", network["name"], platform["name"])


def destroy(platforms: list[dict[str, Any]]) -> None:
    names = [platform["name"] for platform in platforms]
    docker("rm", "--force", "--volumes", *names, check=False)
    for name in network_names(platforms):
        docker("network", "rm", name, check=False)


def main() -> None:
    action = sys.argv[1] if len(sys.argv) == 2 else ""
    if action not in ("create", "destroy"):
        sys.exit("usage: platforms.py create|destroy < platforms.json")
    platforms = json.load(sys.stdin)
    unknown = sorted({key for platform in platforms for key in platform} - KNOWN)
    if unknown:
        sys.exit(f"platform keys this create does not know: {', '.join(unknown)} (tests/molecule/platforms.py)")
    if action == "create":
        create(platforms)
    else:
        destroy(platforms)


if __name__ == "__main__":
    main()
