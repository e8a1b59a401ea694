"""replace-node's parts that need no cluster: the node ledger, known_hosts, the re-entrant lock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from provisioner.ansible.known_hosts import known_hosts_file
from provisioner.ansible.ledger import node_history
from provisioner.ansible.lock import inventory_lock
from provisioner.cli import main
from provisioner.errors import InputError, LockHeldError
from provisioner.inventory.loader import load_inventory
from provisioner.paths import PROJECT_ROOT


def _record(runs: Path, name: str, summary: dict | None = None, certification: dict | None = None) -> None:
    record = runs / name
    record.mkdir(parents=True)
    if summary is not None:
        (record / "summary.json").write_text(json.dumps(summary))
    if certification is not None:
        (record / "certification.json").write_text(json.dumps(certification))


def _certified(node: str, ok: bool = True, injected: bool = False) -> dict:
    return {"fault_injected": injected, "node_verdicts": {node: {"certified": ok, "failed_checks": []}}}


def test_a_node_is_resumable_only_when_certified_after_its_last_change(tmp_path: Path):
    runs = tmp_path / "runs"
    assert not node_history(runs, "gpu02").certified_since_change
    _record(runs, "20261201T100000Z-apply", {"command": "apply", "hosts": {"gpu02": {"changed": 3}}})
    _record(runs, "20261201T110000Z-certify", {"command": "certify"}, _certified("gpu02"))
    assert node_history(runs, "gpu02").certified_since_change
    # a check run or an apply that changed nothing on the node is not a change
    _record(runs, "20261201T120000Z-check", {"command": "check", "check": True, "hosts": {"gpu02": {"changed": 1}}})
    _record(runs, "20261201T130000Z-apply", {"command": "apply", "hosts": {"gpu02": {"changed": 0}}})
    assert node_history(runs, "gpu02").certified_since_change
    _record(runs, "20261201T140000Z-replace-node", {"command": "replace-node", "hosts": {"gpu02": {"changed": 9}}})
    history = node_history(runs, "gpu02")
    assert not history.certified_since_change and history.last_change == "20261201T140000Z-replace-node"
    # a failed certification, or one with an injected fault, does not count
    _record(runs, "20261201T150000Z-certify", {"command": "certify"}, _certified("gpu02", ok=False))
    _record(runs, "20261201T160000Z-certify", {"command": "certify"}, _certified("gpu02", injected=True))
    assert not node_history(runs, "gpu02").certified_since_change
    _record(runs, "20261201T170000Z-certify", {"command": "certify"}, _certified("gpu02"))
    assert node_history(runs, "gpu02").certified_since_change
    assert not node_history(runs, "gpu01").certified_since_change


def test_the_known_hosts_file_is_the_one_ansible_checks():
    args = "-o UserKnownHostsFile=/srv/lab/known_hosts -o StrictHostKeyChecking=yes"
    assert known_hosts_file({"ansible_ssh_common_args": args}) == Path("/srv/lab/known_hosts")
    assert known_hosts_file({}) == Path("~/.ssh/known_hosts").expanduser()


def test_a_command_covers_its_own_runs_and_the_lock_refuses_everyone_else(tmp_path: Path):
    # not covered: refused even in the same process
    with inventory_lock(tmp_path, "apply"), pytest.raises(LockHeldError), inventory_lock(tmp_path, "drain"):
        pass
    with inventory_lock(tmp_path, "replace-node", covers_nested=True), inventory_lock(tmp_path, "drain"):
        other = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; from provisioner.ansible.lock import "
             "inventory_lock\ntry:\n with inventory_lock(Path(sys.argv[1]), 'apply'): print('got it')\n"
             "except Exception as e: print(type(e).__name__, e)", str(tmp_path)],
            capture_output=True, text=True, check=True)
        assert other.stdout.startswith("LockHeldError") and "provision replace-node" in other.stdout
    with pytest.raises(RuntimeError), inventory_lock(tmp_path, "apply"):
        raise RuntimeError("a failed step")
    released = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path\n"
         "from provisioner.ansible.lock import inventory_lock\n"
         "with inventory_lock(Path(sys.argv[1]), 'apply'): print('got it')", str(tmp_path)],
        capture_output=True, text=True, check=True)
    assert released.stdout.strip() == "got it"


def test_any_host_can_be_replaced_and_its_roles_are_recorded():
    from provisioner.errors import InputError
    from provisioner.inventory.loader import load_inventory
    from provisioner.operations.lifecycle import check_host, host_roles

    inventory = load_inventory("example")
    check_host(inventory, "ctl01")
    assert host_roles(inventory, "ctl01") == ["controller", "monitoring"]
    assert host_roles(inventory, "gpu01") == ["gpu_nodes"]
    with pytest.raises(InputError) as refused:
        check_host(inventory, "ctl09")
    assert "ctl09 is not a host of inventory example" in str(refused.value.problems[0])


def test_a_planted_lock_link_is_refused_and_its_target_untouched(example_inventory: Path, tmp_path: Path, capsys):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (example_inventory / ".provision.lock").symlink_to(victim)
    with pytest.raises(InputError) as caught, inventory_lock(example_inventory, "apply"):
        pass
    assert "is a symbolic link" in str(caught.value)
    assert victim.read_text() == "precious\n"
    assert main(["apply", "-i", str(example_inventory)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "precious\n"


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux) to run as another user")
def test_a_read_only_inventory_folder_is_bad_input_not_a_traceback(example_inventory: Path, tmp_path: Path):
    shared = Path(tempfile.mkdtemp(prefix="provision-ro-"))  # pytest's own folders are private to root
    shared.chmod(0o755)
    example_inventory = Path(shutil.copytree(example_inventory, shared / "inv"))
    request = _run_as_nobody(example_inventory, tmp_path)
    shutil.rmtree(shared)
    assert request.returncode == 2, request.stderr
    assert "Traceback" not in request.stderr
    assert "cannot be created" in request.stderr and ".provision.lock" in request.stderr


def _run_as_nobody(example_inventory: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "provisioner.cli", "apply", "-i", str(example_inventory)]
    if os.geteuid() == 0:  # root writes anywhere: run as nobody, for whom the folder is read-only
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    else:
        example_inventory.chmod(0o555)
    return subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT,
                          env={**os.environ, "PROVISION_RUNS_DIR": str(tmp_path / "runs")})


def test_certify_holds_the_lock_through_its_drain(example_inventory: Path, monkeypatch):
    from provisioner.certify import run as certify_run

    seen = {}

    def locked(request, console):
        probe = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; from provisioner.ansible.lock import "
             "inventory_lock\ntry:\n with inventory_lock(Path(sys.argv[1]), 'apply'): print('got it')\n"
             "except Exception as e: print(type(e).__name__)", str(example_inventory)],
            capture_output=True, text=True, cwd=PROJECT_ROOT)
        seen["other"] = probe.stdout.strip()
        with inventory_lock(example_inventory, "drain"):  # the drain's own run, nested
            seen["drain"] = "ran"
        return 0, None, None

    monkeypatch.setattr(certify_run, "_run_certification_locked", locked)
    request = type("Request", (), {"inventory": load_inventory(str(example_inventory))})()
    certify_run.run_certification(request, None)
    assert seen == {"other": "LockHeldError", "drain": "ran"}


def test_a_host_key_is_chosen_only_by_its_exact_fingerprint(tmp_path: Path):
    from provisioner.ansible import known_hosts

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    public = " ".join((tmp_path / "host.pub").read_text().split()[:2])
    key = known_hosts.described(public)
    shown = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "host.pub")], capture_output=True, text=True,
                           check=True).stdout.split()[1]
    assert key is not None and key.fingerprint == shown and key.kind == "ED25519"
    assert known_hosts.chosen([key], shown) == [key]
    assert known_hosts.chosen([key], shown.removeprefix("SHA256:")) == [key]
    assert known_hosts.chosen([key], shown[:-1]) == []
    known = tmp_path / "known_hosts"
    known_hosts.record(known, "gpu02", "10.0.0.7", [key], port=2222)
    assert known.read_text() == f"[10.0.0.7]:2222,[gpu02]:2222 {public}\n"
