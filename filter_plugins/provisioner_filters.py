"""Jinja filters that hand vendor-tool output and fleet facts to the provisioner package.

Filters run on the control node, where the `provisioner` package is installed, so the
parsers and the fleet comparison live in one place (the package) and are not copied into
modules shipped to the nodes.
"""

from __future__ import annotations

import shlex
from typing import Any

from provisioner.certify import jobs as certify_jobs
from provisioner.facts import (
    cuda_compat,
    fabric,
    fleet,
    monitoring,
    munge,
    nccl_profiles,
    packages,
    slurm_config,
    tables,
)
from provisioner.parsers import PARSERS, ParseError, parse_nvidia_smi_csv, slurm


def parse_tool_output(text: str, kind: str) -> dict[str, Any]:
    """`{{ result.stdout | parse_tool_output('nvidia-smi') }}`; raises on text of another tool."""
    try:
        return PARSERS[kind](text)
    except ParseError as error:
        raise ValueError(f"{kind}: {error}") from error


def parse_nvidia_smi_query(text: str, fields: list[str] | None = None) -> dict[str, Any]:
    return parse_nvidia_smi_csv(text, fields)


def fleet_differences(facts_by_host: dict[str, dict[str, Any]], pins: dict[str, Any]) -> list[dict[str, str]]:
    return fleet.differences(facts_by_host, pins)


def node_versions(nvidia_smi_q: str, mlxfwmanager_query: str, packages: dict, ofed_info: str) -> dict[str, Any]:
    return fleet.node_versions(nvidia_smi_q, mlxfwmanager_query, packages, ofed_info)


def fleet_facts(hostvars: Any, gpu_hosts: list[str], play_hosts: list[str]) -> dict[str, dict[str, Any]]:
    return fleet.fleet_facts(hostvars, gpu_hosts, play_hosts)


def version_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return fleet.version_changes(before or {}, after or {})


def fleet_table(rows: list[dict[str, str]]) -> str:
    return fleet.table(rows)


def ib_port_problems(ibstat: dict[str, Any], fabric_kind: str, hca_count: int, rate_gbps: int | float,
                     names: list[str] | None = None) -> list[dict[str, str]]:
    return fabric.port_problems(ibstat, fabric_kind, int(hca_count), rate_gbps, names or None)


def rdma_devices(ibstat: dict[str, Any], fabric_kind: str, names: list[str] | None = None) -> list[str]:
    return fabric.rdma_devices(ibstat, fabric_kind, names or None)


def ipoib_problems(ip_json: str, interfaces: list[dict[str, Any]]) -> list[str]:
    return fabric.ipoib_problems(ip_json, list(interfaces or []))


def port_table(rows: list[dict[str, str]]) -> str:
    return tables.text_table(rows, fabric.PORT_COLUMNS)


def nccl_environment(profiles: dict[str, Any], fabric_kind: str, derived: dict[str, Any], opt_in: list[str],
                     overrides: dict[str, Any]) -> dict[str, str]:
    return nccl_profiles.nccl_environment(profiles, fabric_kind, derived, list(opt_in or []), dict(overrides or {}))


def nccl_assignments(lines: list[str]) -> dict[str, str]:
    return nccl_profiles.nccl_assignments(list(lines))


def nccl_ib_hca(devices: list[str]) -> str:
    return nccl_profiles.ib_hca_setting(list(devices))


def shell_quote(value: Any) -> str:
    return shlex.quote(str(value))


def slurm_node_line(name: str, hostvars: Any, reserve_percent: float, current_nodes_conf: str = "") -> str:
    return slurm_config.node_line_from_hostvars(name, hostvars, float(reserve_percent), current_nodes_conf or "")


def slurm_partition_lines(partitions: list[dict[str, Any]], gpu_nodes: list[str], groups: Any) -> list[str]:
    return slurm_config.partition_lines(list(partitions), list(gpu_nodes), {k: list(v) for k, v in groups.items()})


def slurm_gres_type(gpu_model: str) -> str:
    return slurm_config.gres_type(str(gpu_model))


def slurm_node_states(sinfo: str) -> dict[str, dict[str, str]]:
    return slurm.node_details(sinfo)


def slurm_unsettled_nodes(sinfo: str, nodes: list[str]) -> list[str]:
    return slurm.unsettled_nodes(sinfo, list(nodes))


def fabric_ports(ibstat: dict[str, Any], fabric_kind: str, names: list[str] | None = None) -> list[dict[str, str]]:
    return fabric.fabric_ports(ibstat, fabric_kind, names or None)


def monitoring_scrape_targets(hosts: list[str], hostvars: Any, port: int, gpu_nodes: list[str],
                              partitions: list[dict[str, Any]], groups: Any) -> list[dict[str, Any]]:
    return monitoring.scrape_targets(list(hosts), hostvars, port, list(gpu_nodes), list(partitions or []),
                                     {name: list(members) for name, members in dict(groups).items()})


def monitoring_tls_names(hosts: list[str], hostvars: Any) -> dict[str, list[str]]:
    return monitoring.tls_names(list(hosts), hostvars)


def web_password_hash(password: str, cluster: str) -> str:
    return monitoring.web_password_hash(str(password), str(cluster))


def _plain(value: Any) -> Any:
    """Inventory data as plain Python: a Vault-encrypted value (`!vault`) as its plain text, which
    to_nice_yaml would otherwise write back as its ciphertext."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, str) or hasattr(value, "_ciphertext"):
        return str(value)
    return value


def monitoring_receiver_problems(receivers: Any) -> list[str]:
    """What is wrong with monitoring_alert_receivers (the inventory validation's rules), never its values."""
    return [f"monitoring_alert_receivers{key}: {message}"
            for key, message in monitoring.receiver_problems(_plain(receivers))]


def alertmanager_config(receivers: list[dict[str, Any]], group_wait: str, group_interval: str,
                        repeat_interval: str) -> dict[str, Any]:
    return monitoring.alertmanager_config(_plain(list(receivers or [])), group_wait, group_interval, repeat_interval)


def grafana_dashboard(spec: dict[str, Any], datasource_uid: str) -> dict[str, Any]:
    return monitoring.grafana_dashboard(spec, datasource_uid)


def dcgm_counter_fields(csv_text: str) -> list[str]:
    return monitoring.dcgm_counter_fields(csv_text)


def dcgm_exporter_problems(metrics_text: str, expected_gpus: int, fields: list[str]) -> list[str]:
    return monitoring.dcgm_exporter_problems(metrics_text, int(expected_gpus), list(fields))


def monitoring_target_problems(active_targets: list[dict[str, Any]],
                               expected: dict[str, list[str]]) -> list[dict[str, str]]:
    return monitoring.target_problems(list(active_targets), {job: list(hosts) for job, hosts in expected.items()})


def target_table(rows: list[dict[str, str]]) -> str:
    return tables.text_table(rows, ("job", "host", "health", "error"))


def packages_to_change(wanted: dict[str, str], installed: dict[str, list[dict[str, Any]]]) -> list[str]:
    return packages.packages_to_change(dict(wanted), dict(installed))


def dpkg_query_argv(names: list[str]) -> list[str]:
    return packages.dpkg_query_argv([str(name) for name in names])


def dpkg_state(text: str) -> dict[str, dict[str, Any]]:
    return packages.dpkg_state(str(text))


def installed_versions(state: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`{{ query.stdout | dpkg_state | installed_versions }}`: the state as package_facts has it."""
    return packages.as_package_facts(dict(state))


def holds_to_release(wanted: dict[str, str], state: dict[str, dict[str, Any]]) -> list[str]:
    return packages.holds_to_release(dict(wanted), dict(state))


def holds_to_set(wanted: dict[str, str], state: dict[str, dict[str, Any]]) -> list[str]:
    return packages.holds_to_set(dict(wanted), dict(state))


def apt_names(wanted: dict[str, str]) -> list[str]:
    return packages.apt_names(dict(wanted))


def torch_driver_problem(pip_packages: list[str], driver_version: str, extra_index_url: str = "",
                         stated: str = "") -> str:
    """Why the pinned torch cannot use the GPUs under the pinned driver; '' when it can."""
    return cuda_compat.torch_driver_problem([str(pin) for pin in pip_packages], str(driver_version or ""),
                                            str(extra_index_url or ""), str(stated or "")) or ""


def cuda_arch_problem(arch: str, cuda_release: str) -> str:
    return cuda_compat.arch_problem(str(arch), str(cuda_release)) or ""


def checkpoint_bytes(model: str) -> int:
    """`{{ certification_checkpoint_model | checkpoint_bytes }}`: the target model's checkpoint in bytes
    (mixed precision with Adam), as `provision plan` sizes it."""
    from provisioner.plan.checkpoint import checkpoint

    return int(checkpoint(str(model), ranks=1).total_bytes)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "certify_busy_nodes": certify_jobs.busy_nodes,
            "checkpoint_bytes": checkpoint_bytes,
            "torch_driver_problem": torch_driver_problem,
            "cuda_arch": cuda_compat.cuda_arch,
            "cuda_arch_problem": cuda_arch_problem,
            "nvcc_gencode": cuda_compat.nvcc_gencode,
            "ldd_missing": cuda_compat.ldd_missing,
            "pip_pins_to_install": packages.pip_pins_to_install,
            "dpkg_query_argv": dpkg_query_argv,
            "dpkg_state": dpkg_state,
            "installed_versions": installed_versions,
            "holds_to_release": holds_to_release,
            "holds_to_set": holds_to_set,
            "apt_names": apt_names,
            "parse_tool_output": parse_tool_output,
            "parse_nvidia_smi_query": parse_nvidia_smi_query,
            "fleet_differences": fleet_differences,
            "fleet_table": fleet_table,
            "version_changes": version_changes,
            "node_versions": node_versions,
            "fleet_facts": fleet_facts,
            "ib_port_problems": ib_port_problems,
            "rdma_devices": rdma_devices,
            "port_table": port_table,
            "ipoib_problems": ipoib_problems,
            "nccl_environment": nccl_environment,
            "nccl_ib_hca": nccl_ib_hca,
            "nccl_assignments": nccl_assignments,
            "shell_quote": shell_quote,
            "munge_key_problem": munge.munge_key_problem,
            "munge_key_checksum": munge.munge_key_checksum,
            "munge_key_source": munge.munge_key_source,
            "munge_key_report": munge.key_report,
            "slurm_node_line": slurm_node_line,
            "slurm_partition_lines": slurm_partition_lines,
            "slurm_gres_type": slurm_gres_type,
            "slurm_node_states": slurm_node_states,
            "slurm_unsettled_nodes": slurm_unsettled_nodes,
            "fabric_ports": fabric_ports,
            "monitoring_scrape_targets": monitoring_scrape_targets,
            "monitoring_tls_names": monitoring_tls_names,
            "web_password_hash": web_password_hash,
            "alertmanager_config": alertmanager_config,
            "monitoring_receiver_problems": monitoring_receiver_problems,
            "grafana_dashboard": grafana_dashboard,
            "dcgm_counter_fields": dcgm_counter_fields,
            "dcgm_exporter_problems": dcgm_exporter_problems,
            "monitoring_target_problems": monitoring_target_problems,
            "target_table": target_table,
            "packages_to_change": packages_to_change,
        }
