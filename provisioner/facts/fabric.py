"""The training fabric as a node's HCAs report it (ibstat), against what the inventory expects.

A port that trained at a lower rate, an HCA that vanished from the PCIe bus or a port
without a subnet manager does not stop a job from starting: it makes every all-reduce of
the whole cluster slower, or hangs it. Each such port is named here.
"""

from __future__ import annotations

import json
from typing import Any

LINK_LAYERS = {"infiniband": "InfiniBand", "roce": "Ethernet"}
PORT_COLUMNS = ("hca", "port", "state", "physical", "rate", "link layer", "problem")


def _fabric_cas(cas: list[dict[str, Any]], fabric: str, names: list[str] | None) -> list[dict[str, Any]]:
    """The HCAs that carry the fabric: those named, or else those with a port of its link layer."""
    if names:
        return [ca for ca in cas if ca["name"] in names]
    layer = LINK_LAYERS[fabric]
    return [ca for ca in cas if any(port.get("link_layer") == layer for port in ca["ports"])]


def _row(ca: str, port: Any, details: dict[str, Any] | None, problem: str) -> dict[str, str]:
    details = details or {}
    rate = details.get("rate_gbps")
    return {"hca": ca, "port": str(port), "state": str(details.get("state") or "-"),
            "physical": str(details.get("physical_state") or "-"), "rate": "-" if rate is None else str(rate),
            "link layer": str(details.get("link_layer") or "-"), "problem": problem}


def port_problems(ibstat: dict[str, Any], fabric: str, hca_count: int, rate_gbps: int | float,
                  names: list[str] | None = None) -> list[dict[str, str]]:
    """One row per problem: missing HCAs, wrong HCA count, and every port of a fabric HCA
    that is not Active/LinkUp at `rate_gbps` on the fabric's link layer (with a subnet
    manager, on InfiniBand). An 'ethernet' fabric has no RDMA ports to check."""
    if fabric not in LINK_LAYERS:
        return []
    layer = LINK_LAYERS[fabric]
    cas = _fabric_cas(ibstat.get("cas") or [], fabric, names)
    rows: list[dict[str, str]] = []
    for missing in sorted(set(names or []) - {ca["name"] for ca in cas}):
        rows.append(_row(missing, "-", None, "HCA not found"))
    if not names and len(cas) != hca_count:
        found = ", ".join(ca["name"] for ca in cas) or "none"
        rows.append(_row("-", "-", None, f"{len(cas)} {layer} HCAs found ({found}), the inventory expects {hca_count}"))
    for ca in cas:
        for port in ca["ports"]:
            problems = []
            if port.get("state") != "Active":
                problems.append(f"state {port.get('state') or 'unknown'}, expected Active")
            if port.get("physical_state") != "LinkUp":
                problems.append(f"physical state {port.get('physical_state') or 'unknown'}, expected LinkUp")
            if port.get("link_layer") != layer:
                problems.append(f"link layer {port.get('link_layer') or 'unknown'}, expected {layer}")
            if not problems and port.get("rate_gbps") != rate_gbps:
                problems.append(f"rate {port.get('rate_gbps')} Gb/s, expected {rate_gbps}")
            if not problems and fabric == "infiniband" and not port.get("sm_lid"):
                problems.append("no subnet manager (SM lid 0)")
            if problems:
                rows.append(_row(ca["name"], port["port"], port, "; ".join(problems)))
    return rows


def rdma_devices(ibstat: dict[str, Any], fabric: str, names: list[str] | None = None) -> list[str]:
    """`hca:port` of every Active port on the fabric's link layer, in NCCL_IB_HCA's syntax."""
    if fabric not in LINK_LAYERS:
        return []
    layer = LINK_LAYERS[fabric]
    return [f"{ca['name']}:{port['port']}" for ca in _fabric_cas(ibstat.get("cas") or [], fabric, names)
            for port in ca["ports"] if port.get("state") == "Active" and port.get("link_layer") == layer]


def fabric_ports(ibstat: dict[str, Any], fabric: str, names: list[str] | None = None) -> list[dict[str, str]]:
    """{device, port} of every port of the fabric HCAs on the fabric's link layer, whatever
    its state: the ports monitoring expects to see Active (a vanished one is an alert too)."""
    if fabric not in LINK_LAYERS:
        return []
    layer = LINK_LAYERS[fabric]
    return [{"device": ca["name"], "port": str(port["port"])}
            for ca in _fabric_cas(ibstat.get("cas") or [], fabric, names)
            for port in ca["ports"] if port.get("link_layer") == layer]


def ipoib_problems(ip_json: str, interfaces: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the IPoIB interfaces, from `ip -json address show`: a missing
    interface, or one without its configured address (CIDR)."""
    links = {link["ifname"]: link for link in json.loads(ip_json or "[]")}
    problems = []
    for wanted in interfaces:
        link = links.get(wanted["name"])
        if link is None:
            problems.append(f"IPoIB interface {wanted['name']} does not exist "
                            "(ib_ipoib not loaded, or the HCA is missing)")
            continue
        found = [f"{info['local']}/{info['prefixlen']}" for info in link.get("addr_info", [])
                 if info.get("family") == "inet"]
        if wanted["address"] not in found:
            problems.append(f"IPoIB interface {wanted['name']} has {', '.join(found) or 'no IPv4 address'}, "
                            f"expected {wanted['address']}")
    return problems
