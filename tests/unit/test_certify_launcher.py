"""The launcher Slurm runs on every node of a certification job, with stand-ins for what it calls."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parents[2] / "roles/certification/files/provision-certify-launch"
SCONTROL = """#!/bin/sh
case "$2" in
  hostnames) printf 'gpu07\\ngpu08\\n' ;;
  node) echo "NodeName=$4 Arch=x86_64 CoresPerSocket=32 NodeAddr=10.20.0.7 NodeHostName=$4 Version=22.05.8" ;;
esac
"""
# Prints what it was started with: its arguments and the variables the launcher sets.
PROBE = """#!/bin/sh
echo "ARGS $*"
echo "NCCL_TESTS_DEVICE=${NCCL_TESTS_DEVICE-unset} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE-unset}" \\
     "NCCL_DEBUG=${NCCL_DEBUG-unset}"
"""


@pytest.fixture
def node(tmp_path: Path) -> dict[str, str]:
    """A node's launcher settings and a PATH with scontrol, torchrun and all_reduce_perf stand-ins."""
    bin_dir = tmp_path / "bin"
    (tmp_path / "venv/bin").mkdir(parents=True)
    bin_dir.mkdir()
    for path, text in ((bin_dir / "scontrol", SCONTROL), (tmp_path / "venv/bin/torchrun", PROBE),
                       (tmp_path / "all_reduce_perf", PROBE)):
        path.write_text(text)
        path.chmod(0o755)
    conf = tmp_path / "certify.conf"
    conf.write_text(f"CERTIFY_ROOT={tmp_path}\nCERTIFY_VENV={tmp_path}/venv\n"
                    f"CERTIFY_ALL_REDUCE_PERF={tmp_path}/all_reduce_perf\nCERTIFY_PROCS_PER_NODE=8\n"
                    "CERTIFY_SOCKET_INTERFACE=lo\nCERTIFY_MIN_BYTES=1024\nCERTIFY_GRADIENT_BYTES=4096\n"
                    "CERTIFY_ITERS=2\nCERTIFY_WARMUP_ITERS=1\nCERTIFY_REPEATS=3\nCERTIFY_REQUIRE_CUDA=1\n"
                    "CERTIFY_RENDEZVOUS_PORT_MIN=29500\nCERTIFY_RENDEZVOUS_PORT_MAX=30499\nCERTIFY_NVLS_ENABLE=0\n")
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "CUDA_", "NCCL_"))}
    return {**environment, "CERTIFY_CONF": str(conf), "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "SLURM_JOB_ID": "123456", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_NNODES": "2",
            "SLURM_NODEID": "1", "SLURM_PROCID": "11", "SLURM_LOCALID": "3"}


def launch(environment: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(LAUNCHER), *args], capture_output=True, text=True, env=environment, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_torchrun_meets_at_the_first_nodes_slurm_address_on_a_port_of_the_range(node):
    out = launch(node, "train", "--steps", "5")
    assert "--master-addr=10.20.0.7" in out and "--master-port=29956" in out  # 29500 + 123456 % 1000
    assert "--nnodes=2 --node-rank=1 --nproc-per-node=8" in out and "--require-cuda" in out
    assert "NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN" in out


@pytest.mark.parametrize(("visible", "device"), [
    (None, "unset"),  # every GPU of the node: nccl-tests takes GPU <local rank>
    ("0,1,2,3,4,5,6,7", "unset"),
    ("3", "0"),  # --gpu-bind: the task's own GPU only, the first it sees
    ("6,7", "0"),
])
def test_nccl_tests_rank_takes_its_own_gpu_however_slurm_binds_them(node, visible, device):
    if visible is not None:
        node["CUDA_VISIBLE_DEVICES"] = visible
    out = launch(node, "nccl-tests")
    assert f"NCCL_TESTS_DEVICE={device} NCCL_NVLS_ENABLE=0" in out
    assert "ARGS -b 1024 -e 4096 -f 2 -g 1 -c 1 -n 2 -w 1" in out


def storage_node(node: dict[str, str], tmp_path: Path, direct: bool) -> dict[str, str]:
    """The node's settings with a checkpoints directory (the real fio writes there)."""
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    conf = Path(node["CERTIFY_CONF"])
    conf.write_text(conf.read_text().replace("CERTIFY_PROCS_PER_NODE=8", "CERTIFY_PROCS_PER_NODE=2")
                    + f"CERTIFY_CHECKPOINT_DIR={checkpoints}\nCERTIFY_STORAGE_DIRECT={int(direct)}\n")
    return node


@pytest.mark.parametrize("direct", [False, True])
def test_storage_writes_and_reads_each_ranks_shard_with_fio(node, tmp_path: Path, direct: bool):
    from provisioner.certify.outputs import storage_facts

    environment = storage_node(node, tmp_path, direct)
    if direct and subprocess.run(["dd", "if=/dev/zero", f"of={tmp_path}/checkpoints/o", "bs=4096", "count=1",
                                  "oflag=direct"], capture_output=True, check=False).returncode != 0:
        pytest.skip("this filesystem refuses O_DIRECT")  # tmpfs: the buffered case above still runs
    out = launch(environment, "storage", "--bytes-per-rank", "3000000")
    facts = storage_facts(out)
    for phase in ("write", "read"):
        # under 4 MiB: one block of whole 4 KiB pages (733 of them) per rank
        assert facts[phase]["bytes"] == 2 * 733 * 4096 and facts[phase]["ranks"] == 2
        assert facts[phase]["seconds"] > 0 and facts[phase]["gbps"] > 0 and facts[phase]["direct"] is direct
    # above: whole 4 MiB blocks, rounded up (the lab's 70 MB shard is 17 blocks)
    big = storage_facts(launch(environment, "storage", "--bytes-per-rank", "70000000"))
    assert big["write"]["bytes"] == big["read"]["bytes"] == 2 * 17 * 4 * 2**20
    # it cleans up after itself
    assert list((tmp_path / "checkpoints" / ".provision-certify").iterdir()) == []


def test_storage_without_a_checkpoints_filesystem_fails_naming_the_node(node, tmp_path: Path):
    environment = storage_node(node, tmp_path, False)
    conf = Path(environment["CERTIFY_CONF"])
    conf.write_text(conf.read_text().replace(f"CERTIFY_CHECKPOINT_DIR={tmp_path}/checkpoints",
                                             f"CERTIFY_CHECKPOINT_DIR={tmp_path}/nowhere"))
    done = subprocess.run([str(LAUNCHER), "storage", "--bytes-per-rank", "4096"], capture_output=True, text=True,
                          env=environment, timeout=30, check=False)
    assert done.returncode == 1 and f"no checkpoints filesystem at '{tmp_path}/nowhere'" in done.stderr


def test_a_rotated_training_gives_each_node_the_next_nodes_ranks_and_meets_at_rank_zeros_node(node):
    # gpu[07-08], this is node 1 (gpu08): rotated, it runs node rank 0 and the rendezvous is its own
    # address (the stand-in scontrol answers every node with 10.20.0.7).
    out = launch(node, "train", "--rotate-nodes", "--resume", "--steps", "5")
    assert "--nnodes=2 --node-rank=0 --nproc-per-node=8" in out and "--rotate-nodes" not in out
    assert "--resume --steps 5" in out
