"""The lab's inventory (inventory/lab/), written by `provision lab up`: its hosts, and the
settings that make a cluster of containers on one machine a cluster (the lab repository,
CPU-sized certification, fast monitoring)."""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml

from provisioner.lab import certify_files
from provisioner.lab import state as hw_state
from provisioner.lab.apt_repo import lab_cuda_packages
from provisioner.lab.engine import host_lacks_sys_resource
from provisioner.lab.layout import (
    CHECKPOINT_MOUNT,
    CONTROLLER,
    LAB_HCAS,
    LAB_USER,
    REPO,
    REPO_PORT,
    SHARED_CHECKPOINTS,
    SHARED_MOUNT,
)
from provisioner.paths import lab_dir, lab_inventory_dir


def lab_secret(name: str) -> str:
    """A random secret made once per lab folder (kept in .lab/, mode 0600): the same across
    `lab up`s, as an operator's Vault value is across applies."""
    path = lab_dir() / "secrets" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.touch(mode=0o600)
        path.write_text(uuid.uuid4().hex + "\n")
    return path.read_text().strip()


def write_lab_inventory(addresses: dict[str, str], gpus_per_node: int) -> Path:
    """Write inventory/lab/: hosts.yml (addresses, SSH settings) and group_vars."""
    directory = lab_inventory_dir()
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    gpu_hosts = {node: {"ansible_host": address} for node, address in addresses.items() if node != CONTROLLER}
    hosts = {
        "all": {
            "vars": {
                "ansible_user": LAB_USER,
                "ansible_become": True,
                "ansible_ssh_private_key_file": str(lab_dir() / "ssh" / "id_ed25519"),
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={lab_dir() / 'known_hosts'} "
                                           "-o StrictHostKeyChecking=yes",
            },
            "children": {
                "controller": {"hosts": {CONTROLLER: {"ansible_host": addresses[CONTROLLER]}}},
                "monitoring": {"hosts": {CONTROLLER: None}},
                "gpu_nodes": {"hosts": gpu_hosts},
            },
        }
    }
    header = "# Written by `provision lab up`; regenerated on every lab up. Do not edit.\n"
    (directory / "hosts.yml").write_text(header + yaml.safe_dump(hosts, sort_keys=False))
    cluster = {
        "cluster_name": "lab",
        "fabric": "infiniband",
        "gpu_driver_version": hw_state.DEFAULT_DRIVER_VERSION,
        "dcgm_version": "1:3.3.9",
        # The lab's own package mirror (stand-in NVIDIA packages; unsigned, hence trusted=yes).
        "gpu_driver_apt_repository": f"deb [trusted=yes] http://{REPO}:{REPO_PORT}/ ./",
        "gpu_driver_apt_key_url": "",
        "firmware_hca_versions": {hw_state.CONNECTX7_PSID: hw_state.DEFAULT_HCA_FIRMWARE},
        # The shared volume stands in for the NFS a cluster keeps Slurm's state, the accounting
        # database's dumps and the monitoring history on: they outlive a rebuilt controller.
        "slurm_state_save_location": f"{SHARED_MOUNT}/slurm/state",
        # The lab network's DNS resolves ctl01 to whichever machine holds the name, as a site's
        # DNS does: jobs running while the controller is rebuilt find the new one.
        "slurm_controller_by_name": True,
        "slurm_accounting_backup_dir": f"{SHARED_MOUNT}/slurm/accounting-backup",
        "slurm_accounting_db_password": lab_secret("accounting-db-password"),
        # Prometheus, Alertmanager and node_exporter answer HTTPS requests with it only.
        "monitoring_web_password": lab_secret("monitoring-web-password"),
        "slurm_accounting_mariadb_version": "1:10.11.18-0+deb12u1",
        "monitoring_prometheus_storage_path": f"{SHARED_MOUNT}/monitoring/prometheus",
        "monitoring_alertmanager_storage_path": f"{SHARED_MOUNT}/monitoring/alertmanager",
        "slurm_partitions": [
            {"name": "gpu", "nodes": "ALL", "default": True},
            {"name": "debug", "nodes": "ALL", "max_time": "0:30:00"},
        ],
        "nccl_env": {"NCCL_IB_TIMEOUT": 22, "NCCL_IB_RETRY_CNT": 7},
        # Debian 12's Slurm, pinned as production pins it.
        "slurm_version": "22.05.8-4+deb12u3",
        # The stand-in dcgm-exporter paired with DCGM 3.3.9.
        "dcgm_exporter_version": "3.3.9-3.6.1-1",
        # Fast enough for tests to see an alert within a minute.
        "monitoring_scrape_interval": "5s",
        "monitoring_evaluation_interval": "5s",
        "monitoring_alert_group_wait": "5s",
        # Grafana's package repository is out of reach here: dashboards are provisioned as files.
        "monitoring_grafana_install": False,
        # The certification toolkit from the lab repository: a wheelhouse and nccl-tests' (stand-in) source.
        "certification_pip_find_links": f"http://{REPO}:{REPO_PORT}/{certify_files.WHEELHOUSE}/",
        "certification_pip_extra_args": f"--trusted-host {REPO}",
        "certification_nccl_tests_source": f"http://{REPO}:{REPO_PORT}/{certify_files.NCCL_TESTS_TARBALL}",
        "certification_nccl_tests_version": certify_files.nccl_tests_version(),
        "certification_nccl_tests_make_vars": {},
        # The CUDA compiler and NCCL from the lab repository (stand-ins at the real names and
        # versions); OpenMPI and PMIx are Debian's own, as in production.
        "certification_cuda_packages": lab_cuda_packages("12.2"),
        # The lab's GPUs are device files: torch sees none, so the ranks run on gloo.
        "certification_require_cuda": False,
        # CPU-sized certification: two ranks per node on gloo, 16 MiB gradients, the tiny model.
        "certification_procs_per_node": 2,
        "certification_min_bytes": 1048576,
        "certification_gradient_bytes": 16777216,
        "certification_iters": 10,
        "certification_warmup_iters": 2,
        "certification_preset": "tiny",
        "certification_profile": "lab-cpu",
        "certification_srun_mpi": "pmix",
        # Two containers share this machine's few CPUs: timings wander far more than on dedicated
        # GPUs, so the lab allows more spread. A node container built minutes before measured up to
        # 32 % below its partner (and level with it a few minutes later), and with three GPU nodes
        # on two CPUs one node's nccl-tests alone measured 40.7 % below the others'; the slowed
        # node of the tests is more than 50 % below.
        "certification_variance_percent": 45,
        # Four ranks on two CPUs time-slice with everything else the machine runs: an idle lab's
        # 200-step trainings measured CVs of 0.12-0.16, with the step time moving up 50 % for a
        # third of a run and back; a loaded CI machine went over 0.3. Here the bound catches
        # stalls (one stall of a second in 160 steps of 60 ms: CV about 1.1), not jitter.
        "certification_step_time_cv_max": 1.0,
        # replace-node's 200-step training of the tiny model takes the loss down about 46 %
        # (1000 steps: over 70 %).
        "certification_loss_drop_min": 0.4,
        # A lab job starts in seconds: a rank that makes no progress for 40 s is hung (a real
        # cluster's default, 300 s, leaves NCCL's initialisation on 1,000 nodes room).
        "certification_hang_timeout_s": 40,
        "certification_heartbeat_s": 2,
        # Four ranks time-slice two CPUs: a rank's compute time wanders by tens of percent.
        "certification_straggler_percent": 100,
        "certification_poll_interval_s": 2,
        # Checkpoints: the shared volume's directory bound at /checkpoints on every GPU node (this
        # kernel has no NFS client or server); a 20M-parameter model's checkpoint, 280 MB.
        "storage_filesystems": [{"name": "checkpoints", "type": "bind", "source": SHARED_CHECKPOINTS,
                                 "path": CHECKPOINT_MOUNT, "purpose": "checkpoints"}],
        "certification_checkpoint_model": "20M",
    }
    (directory / "group_vars" / "all.yml").write_text(header + yaml.safe_dump(cluster, sort_keys=False))
    gpu_vars = {"gpu_count": gpus_per_node, "gpu_model": "H100-SXM5-80GB", "ib_hca_count": LAB_HCAS,
                # Containers share the host's kernel: RDMA modules cannot be loaded from a node.
                "infiniband_kernel_modules_load": False, "gpu_driver_peermem_load": False,
                # A container shares the host's kernel and its boot id; PID 1's start time (in
                # clock ticks since the host booted) changes with every restart of the container.
                "upgrade_boot_time_command": "cut -d' ' -f22 /proc/1/stat",
                # shutdown -r asks logind, which lab nodes do not run; systemd itself reboots.
                "upgrade_reboot_command": "systemctl start --job-mode=replace-irreversibly --no-block reboot.target",
                "upgrade_reboot_timeout_s": 300}
    # The simulated HCAs' sysfs view (rendered from the node's hardware state), read by
    # node_exporter's infiniband collector as it reads /sys on a real node.
    gpu_vars["monitoring_node_exporter_sysfs"] = f"{hw_state.NODE_STATE_MOUNT}/{hw_state.SYSFS_DIR_NAME}"
    if host_lacks_sys_resource():
        # No process on this host can raise a hard limit (CAP_SYS_RESOURCE is missing from
        # the bounding set), so no lab node can: the memlock limit is written, not checked.
        gpu_vars["infiniband_memlock_verify"] = False
    (directory / "group_vars" / "gpu_nodes.yml").write_text(header + yaml.safe_dump(gpu_vars, sort_keys=False))
    return directory
