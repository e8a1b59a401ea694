"""The pinned_packages role's decisions: dpkg's state, what to install, hold and release."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from provisioner.facts.packages import (
    apt_names,
    as_package_facts,
    dpkg_query_argv,
    dpkg_state,
    holds_to_release,
    holds_to_set,
    packages_to_change,
)

LISTING = (
    "nvidia-driver\t535.161.08-1\thold\tinstalled\n"
    "nvidia-smi\t535.161.08-1\tinstall\tinstalled\n"
    "slurmd\t22.05.8-4+deb12u3\tdeinstall\tconfig-files\n"
)


def test_dpkg_state_keeps_installed_packages_with_their_hold():
    assert dpkg_state(LISTING) == {"nvidia-driver": {"version": "535.161.08-1", "held": True},
                                   "nvidia-smi": {"version": "535.161.08-1", "held": False}}
    assert dpkg_state("") == {} and dpkg_state("dpkg-query: no packages found matching x\n") == {}


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a dpkg system")
def test_the_query_runs_against_the_real_dpkg_database():
    result = subprocess.run(dpkg_query_argv(["dpkg", "no-such-package-here"]), capture_output=True, text=True,
                            check=False)
    assert result.returncode == 1  # one name is unknown; the known one is still listed
    state = dpkg_state(result.stdout)
    assert list(state) == ["dpkg"] and state["dpkg"]["version"] and state["dpkg"]["held"] is False


def test_nothing_to_do_on_a_host_that_has_everything():
    wanted = {"nvidia-driver": "535.161.08-1", "nvidia-smi": ""}
    state = {"nvidia-driver": {"version": "535.161.08-1", "held": True},
             "nvidia-smi": {"version": "550.54.15-1", "held": False}}
    assert packages_to_change(wanted, as_package_facts(state)) == []
    assert holds_to_release(wanted, state) == [] and holds_to_set(wanted, state) == []


def test_a_moved_pin_releases_the_hold_installs_and_holds_again():
    wanted = {"nvidia-driver": "550.54.15-1", "slurmd": "22.05.8-4+deb12u3", "munge": ""}
    state = dpkg_state(LISTING)
    assert packages_to_change(wanted, as_package_facts(state)) == ["nvidia-driver", "slurmd", "munge"]
    assert holds_to_release(wanted, state) == ["nvidia-driver"]
    assert holds_to_set(wanted, state) == ["slurmd"]  # munge is not pinned: never held
    assert holds_to_set(wanted, {**state, "slurmd": {"version": "22.05.8-4+deb12u3", "held": False}}) == ["slurmd"]
    assert apt_names(wanted) == ["nvidia-driver=550.54.15-1", "slurmd=22.05.8-4+deb12u3", "munge"]


def test_an_unheld_package_at_another_version_is_installed_without_a_release():
    wanted = {"nvidia-smi": "550.54.15-1"}
    state = dpkg_state(LISTING)
    assert holds_to_release(wanted, state) == []
    assert packages_to_change(wanted, as_package_facts(state)) == ["nvidia-smi"]
