"""Bandwidth thresholds per hardware: what a healthy node and fabric reach at gradient-sized messages.

Floors about 10 % under typical healthy all_reduce busbw at large messages (nccl-tests): an
8-GPU NVSwitch H100/H200 node reaches about 480 GB/s inside the node (floor 430), an 8-GPU A100
about 235 (floor 210); across nodes 8 x 400 Gb/s NDR HCAs carry about 385 GB/s (floor 345, so
43.1 per HCA), and a node's inter-node floor is the per-HCA figure times its HCAs. The 5 %
variance check, against the fleet's own median, catches the outliers these floors let by.
An inventory may override either figure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    intra_node_gbps: float
    inter_node_gbps: float
    source: str


# Intra-node all_reduce busbw (GB/s) by the inventory's gpu_model.
INTRA_NODE_GBPS = {
    "H100-SXM5-80GB": 430.0,
    "H200-SXM5-141GB": 430.0,
    "A100-SXM4-80GB": 210.0,
    "A100-SXM4-40GB": 210.0,
    "L40S": 20.0,
    "L4": 10.0,
}
# Inter-node busbw per HCA (GB/s) by port rate in Gb/s.
PER_HCA_GBPS = {100: 10.78, 200: 21.56, 400: 43.125, 800: 86.25}
# Named profiles an inventory selects with certification_profile.
NAMED = {
    # The lab: gloo on shared CPUs over a container network; a sanity floor, not a hardware figure.
    "lab-cpu": Thresholds(intra_node_gbps=0.05, inter_node_gbps=0.02, source="lab-cpu profile"),
}


class ProfileError(ValueError):
    """No thresholds can be worked out; the message says what to set."""


def thresholds(profile: str | None, gpu_model: str, hca_count: int, port_rate: int,
               override: dict[str, float] | None) -> Thresholds:
    """The thresholds for a fleet of `gpu_model` nodes, overrides applied."""
    override = override or {}
    if profile:
        if profile not in NAMED:
            raise ProfileError(f"unknown profile {profile!r}; known: {', '.join(sorted(NAMED))}")
        base = NAMED[profile]
    else:
        intra = INTRA_NODE_GBPS.get(gpu_model)
        per_hca = PER_HCA_GBPS.get(port_rate)
        if intra is None and "intra_node" not in override:
            raise ProfileError(f"no shipped intra-node figure for gpu_model {gpu_model!r}; set "
                               "certification_busbw_thresholds_gbps.intra_node")
        if (per_hca is None or hca_count < 1) and "inter_node" not in override:
            raise ProfileError(f"no shipped inter-node figure for {hca_count} HCA(s) at {port_rate} Gb/s; set "
                               "certification_busbw_thresholds_gbps.inter_node")
        base = Thresholds(intra_node_gbps=intra or 0.0, inter_node_gbps=(per_hca or 0.0) * hca_count,
                          source=f"{gpu_model}, {hca_count} x {port_rate} Gb/s HCA")
    return Thresholds(intra_node_gbps=float(override.get("intra_node", base.intra_node_gbps)),
                      inter_node_gbps=float(override.get("inter_node", base.inter_node_gbps)),
                      source=base.source + (" (inventory overrides)" if override else ""))
