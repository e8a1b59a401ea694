"""The Molecule scenarios' create step: `docker run` with each platform's options, and no option
it does not know passed over in silence."""

from __future__ import annotations

import json
import subprocess
import sys

from provisioner.paths import PROJECT_ROOT
from tests.molecule.platforms import run_argv

PLATFORMS = PROJECT_ROOT / "tests" / "molecule" / "platforms.py"


def test_a_platform_runs_with_its_options_on_its_first_network():
    platform = {"name": "molecule-slurm-ctl", "hostname": "ctl01", "image": "provision-lab-node:latest",
                "pre_build_image": True, "privileged": True, "cgroupns_mode": "host",
                "volumes": ["/sys/fs/cgroup:/sys/fs/cgroup:rw"], "tmpfs": ["/run", "/run/lock"],
                "command": "/lib/systemd/systemd", "groups": ["controller"],
                "networks": [{"name": "molecule-slurm"}]}
    assert run_argv(platform) == [
        "run", "--detach", "--name", "molecule-slurm-ctl", "--hostname", "ctl01", "--label", "owner=molecule",
        "--log-driver", "json-file", "--privileged", "--cgroupns", "host",
        "--volume", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
        "--network", "molecule-slurm", "provision-lab-node:latest", "/lib/systemd/systemd"]
    assert run_argv({"name": "a", "image": "i", "command": "sleep infinity"})[-3:] == ["i", "sleep", "infinity"]


def test_a_platform_option_it_does_not_know_is_refused():
    result = subprocess.run([sys.executable, str(PLATFORMS), "create"], capture_output=True, text=True,
                            input=json.dumps([{"name": "a", "image": "i", "published_ports": ["80:80"]}]))
    assert result.returncode != 0 and "published_ports" in result.stderr
