"""Fleet consistency: every node must run the pinned versions, or where nothing is pinned,
the same versions as every other node. One cluster hung every few hours because three
firmware revisions shipped across 16 nodes; this is the check that catches it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from provisioner.tables import text_table

# Components compared across the fleet: facts key -> (label, pin key)
SCALAR_COMPONENTS = {
    "driver": ("NVIDIA driver", "driver"),
    "gpu_vbios": ("GPU VBIOS", "gpu_vbios"),
    "rdma_core": ("rdma-core", "rdma_core"),
    "ofed": ("MLNX_OFED/DOCA", "ofed"),
}


def _component_values(facts: dict[str, Any]) -> dict[str, Any]:
    """Flatten one host's facts into component -> value (HCA firmware per PSID)."""
    values = {key: facts.get(key) for key in SCALAR_COMPONENTS}
    for psid, versions in (facts.get("hca_firmware") or {}).items():
        values[f"hca_firmware:{psid}"] = versions
    return values


def _label(component: str) -> str:
    if component.startswith("hca_firmware:"):
        return f"HCA firmware ({component.split(':', 1)[1]})"
    return SCALAR_COMPONENTS[component][0]


def _pin(component: str, pins: dict[str, Any]) -> Any:
    if component.startswith("hca_firmware:"):
        return (pins.get("hca_firmware") or {}).get(component.split(":", 1)[1])
    return pins.get(SCALAR_COMPONENTS[component][1])


def _as_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return ", ".join(sorted({str(v) for v in value})) or "none"
    return str(value)


def differences(facts_by_host: dict[str, dict[str, Any]], pins: dict[str, Any]) -> list[dict[str, str]]:
    """Rows {host, component, expected, found} for every host that differs.

    A pinned component must equal its pin on every host (a host whose GPUs report several
    VBIOS versions, or whose HCAs of one PSID carry several firmware versions, differs too).
    An unpinned one must be the same on every host: hosts off the most common value differ;
    with no single most common value, every host differs.
    """
    per_host = {host: _component_values(facts) for host, facts in facts_by_host.items()}
    components = sorted({component for values in per_host.values() for component in values})
    rows: list[dict[str, str]] = []
    for component in components:
        found = {host: _as_text(values.get(component)) for host, values in per_host.items()}
        pin = _pin(component, pins)
        if pin not in (None, ""):
            expected_by_host = dict.fromkeys(found, str(pin))
        else:
            counts = Counter(found.values()).most_common()
            if len(counts) <= 1:
                continue
            tie = len(counts) > 1 and counts[0][1] == counts[1][1]
            expected = "one version fleet-wide" if tie else counts[0][0]
            expected_by_host = dict.fromkeys(found, expected)
        for host in sorted(found):
            if found[host] != expected_by_host[host]:
                rows.append({"host": host, "component": _label(component), "expected": expected_by_host[host],
                             "found": found[host]})
    return rows


def table(rows: list[dict[str, str]]) -> str:
    """A plain-text table of difference rows (for Ansible failure messages and logs)."""
    return text_table(rows, ("host", "component", "expected", "found"), empty="every node matches")


NVIDIA_PACKAGES = ("nvidia-driver", "nvidia-smi", "nvidia-fabricmanager", "datacenter-gpu-manager",
                   "datacenter-gpu-manager-4-core", "rdma-core", "mlnx-ofed-kernel-utils", "doca-ofed")


def node_versions(nvidia_smi_q: str, mlxfwmanager_query: str, packages: dict[str, list[dict[str, Any]]],
                  ofed_info: str) -> dict[str, Any]:
    """One node's versions from its tools' output ('' where a tool is absent or failed)."""
    from provisioner.parsers import ParseError, parse_mlxfwmanager, parse_nvidia_smi_q

    driver, vbios = None, []
    if nvidia_smi_q.strip():
        try:
            smi = parse_nvidia_smi_q(nvidia_smi_q)
            driver = smi["driver_version"]
            vbios = sorted({gpu["vbios_version"] for gpu in smi["gpus"] if gpu["vbios_version"]})
        except ParseError:
            pass
    hca: dict[str, list[str]] = {}
    if mlxfwmanager_query.strip():
        try:
            for device in parse_mlxfwmanager(mlxfwmanager_query)["devices"]:
                if device["psid"] and device["firmware_current"]:
                    hca.setdefault(device["psid"], [])
                    if device["firmware_current"] not in hca[device["psid"]]:
                        hca[device["psid"]].append(device["firmware_current"])
        except ParseError:
            pass
    installed = {name: entries[0]["version"] for name, entries in (packages or {}).items()
                 if name in NVIDIA_PACKAGES and entries}
    return {
        "driver": driver,
        "gpu_vbios": vbios,
        "hca_firmware": {psid: sorted(versions) for psid, versions in sorted(hca.items())},
        "rdma_core": installed.get("rdma-core"),
        "ofed": ofed_info.strip() or None,
        "packages": dict(sorted(installed.items())),
    }


def fleet_facts(hostvars: dict[str, Any], gpu_hosts: list[str], play_hosts: list[str]) -> dict[str, dict[str, Any]]:
    """Versions per GPU node: fresh facts of the hosts in this play, and for the others (a
    limited run) the versions they recorded at their last apply, when they have any."""
    facts: dict[str, dict[str, Any]] = {}
    for host in gpu_hosts:
        variables = hostvars.get(host, {})
        if host in play_hosts and "firmware_facts" in variables:
            facts[host] = variables["firmware_facts"]
        else:
            recorded = (variables.get("ansible_local") or {}).get("provision_versions")
            if isinstance(recorded, dict):
                facts[host] = recorded
    return facts
