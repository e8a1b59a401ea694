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


# Seconds one run of each instrument takes, where no certification of the inventory measured
# them. nccl-tests (-b 32M -e 8G -f 2 -n 20 -w 5 -c 1: per size 21 operations out of place and
# 21 in place, and 5 warm-ups at the largest size) from the time column of published runs on
# 8 x H100 nodes: inside one node, nccl-tests 2.17.8 (tests/fixtures/nccl, 63.0 ms per pass over
# 32 MiB-8 GiB): 2.8 s; between two nodes (16 ranks; github.com/lessizzmore/create-a3mega-ztan-fork,
# ztan-NCCL-test-result: 8 x 200 Gb/s GPUDirect-TCPXO NICs per node, not NDR InfiniBand, but
# 338.8 GB/s busbw at 8 GiB, where 8 x NDR's floor here is 345: the only published two-node
# H100 table with its time column found; 101.5 ms per pass): 4.5 s. A ring's busbw at large
# messages hardly changes with the node count, so all nodes take the pair's time. To these,
# start-up (an assumption, not a measurement): 10 s on one node, 15 s across nodes, plus 0.03 s per node for NCCL's
# initialisation across all of them (about 45 s at 1,024 nodes). The torch sweep runs 66
# operations per size (a check, 5 warm-ups, 3 x 20 timed) against nccl-tests' 42, and spends
# about 20 s importing torch and starting NCCL.
H100_NCCL_TESTS_COLLECTIVES_S = {"node": 2.8, "inter": 4.5}
SWEEP_OPERATIONS_SHARE = 66 / 42
# The smoke training: start-up (torch, the model, NCCL) and seconds per step of each preset on
# an H100 at 40 % MFU (its FLOPs per token over the GPU's bf16 peak; the 1b preset: 8,192 tokens
# x 6.9 GFLOP per step and rank, 0.14 s); the lab's tiny preset on gloo as measured on the lab.
TRAIN_STEP_S = {"tiny": 0.005, "small": 0.02, "1b": 0.143}
TRAIN_STARTUP_S = 60.0
LAB_DURATIONS_S = {"nccl-tests": 5.0, "sweep": 8.0, "storage": 5.0}
LAB_TRAIN_STEP_S, LAB_TRAIN_STARTUP_S = 0.03, 8.0


def durations_s(profile: str | None, preset: str, nodes: int, steps: int = 1000) -> tuple[dict[str, float], str]:
    """Seconds per run of each instrument for the dry run's estimate, and where they come from."""
    if profile == "lab-cpu":
        return ({**LAB_DURATIONS_S, "train": LAB_TRAIN_STARTUP_S + steps * LAB_TRAIN_STEP_S},
                "lab-cpu profile defaults (measured on the lab)")
    inter = H100_NCCL_TESTS_COLLECTIVES_S["inter"] + 15.0 + 0.03 * nodes
    return ({"nccl-tests": round(inter, 1), "sweep": round(inter * SWEEP_OPERATIONS_SHARE + 20.0, 1),
             "train": round(TRAIN_STARTUP_S + 0.03 * nodes + steps * TRAIN_STEP_S.get(preset, 0.143), 1)},
            "defaults from published nccl-tests runs on 8 x H100 nodes (see provisioner/certify/profiles.py)")
