"""Fleet consistency: every node must run the pinned versions, or where nothing is pinned,
the same versions as every other node. One cluster hung every few hours because three
firmware revisions shipped across 16 nodes; this is the check that catches it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from provisioner.facts.tables import text_table

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


def _device_counts(facts: dict[str, Any], component: str, value: Any) -> Counter[str]:
    """How many devices of one host run each version of a component: the GPUs per VBIOS and
    the HCAs per firmware where the facts count them, else one per version the host reports
    (a host that lacks the component counts once as "none")."""
    counted = (facts.get("device_counts") or {}).get(component)
    if isinstance(counted, dict) and counted:
        return Counter({str(version): int(number) for version, number in counted.items()})
    if isinstance(value, list) and value:
        return Counter({str(version): 1 for version in value})
    return Counter({_as_text(value): 1})


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
    An unpinned one is compared with the version most devices run, fleet-wide (GPUs for the
    VBIOS, HCAs for their firmware, hosts for the rest): only hosts that hold another version
    differ. When two versions are run by equally many devices there is no reference: every
    host differs, and the expected column says it is a tie.
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
            devices: Counter[str] = Counter()
            for host, values in per_host.items():
                devices.update(_device_counts(facts_by_host[host], component, values.get(component)))
            counts = devices.most_common()
            if len(counts) <= 1:
                continue
            if len(counts) > 1 and counts[0][1] == counts[1][1]:
                tied = [version for version, number in counts if number == counts[0][1]]
                expected = f"one version fleet-wide (a tie: {' and '.join(sorted(tied))}, {counts[0][1]} each)"
                rows.extend({"host": host, "component": _label(component), "expected": expected,
                             "found": found[host]} for host in sorted(found))
                continue
            expected_by_host = dict.fromkeys(found, counts[0][0])
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

    driver, vbios = None, Counter()
    if nvidia_smi_q.strip():
        try:
            smi = parse_nvidia_smi_q(nvidia_smi_q)
            driver = smi["driver_version"]
            vbios = Counter(gpu["vbios_version"] for gpu in smi["gpus"] if gpu["vbios_version"])
        except ParseError:
            pass
    hca: dict[str, Counter[str]] = {}
    if mlxfwmanager_query.strip():
        try:
            for device in parse_mlxfwmanager(mlxfwmanager_query)["devices"]:
                if device["psid"] and device["firmware_current"]:
                    hca.setdefault(device["psid"], Counter())[device["firmware_current"]] += 1
        except ParseError:
            pass
    device_counts = {"gpu_vbios": dict(sorted(vbios.items()))} if vbios else {}
    device_counts.update({f"hca_firmware:{psid}": dict(sorted(versions.items()))
                          for psid, versions in sorted(hca.items())})
    installed = {name: entries[0]["version"] for name, entries in (packages or {}).items()
                 if name in NVIDIA_PACKAGES and entries}
    return {
        "driver": driver,
        "gpu_vbios": sorted(vbios),
        "hca_firmware": {psid: sorted(versions) for psid, versions in sorted(hca.items())},
        "device_counts": device_counts,
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


def version_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What an upgrade changed on one node, from its versions before and after (node_versions):
    each package, the OFED/DOCA release and the HCA firmware per PSID, as "name old -> new".
    The loaded driver is left out: after a driver upgrade it is unknown until the reboot."""
    changes = []
    old_packages, new_packages = before.get("packages") or {}, after.get("packages") or {}
    for name in sorted(set(old_packages) | set(new_packages)):
        if old_packages.get(name) != new_packages.get(name):
            changes.append(f"{name} {old_packages.get(name) or 'none'} -> {new_packages.get(name) or 'none'}")
    if before.get("ofed") != after.get("ofed"):
        changes.append(f"{_label('ofed')} {_as_text(before.get('ofed'))} -> {_as_text(after.get('ofed'))}")
    old_firmware, new_firmware = before.get("hca_firmware") or {}, after.get("hca_firmware") or {}
    for psid in sorted(set(old_firmware) | set(new_firmware)):
        if old_firmware.get(psid) != new_firmware.get(psid):
            changes.append(f"{_label('hca_firmware:' + psid)} {_as_text(old_firmware.get(psid))} -> "
                           f"{_as_text(new_firmware.get(psid))}")
    return changes
