"""slurm.conf lines from the whole inventory: nodes from facts, GRES from the inventory, partitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.facts.slurm_config import (
    SlurmConfigError,
    gres_type,
    node_line,
    node_line_from_hostvars,
    partition_lines,
)

FACTS = {"hostname": "gpu01", "processor_vcpus": 128, "processor_count": 2, "processor_cores": 32,
         "processor_threads_per_core": 2, "memtotal_mb": 2063878}
GROUPS = {"gpu_nodes": ["gpu01", "gpu02", "gpu03"], "h100": ["gpu01", "gpu02"], "a100": ["gpu03"]}


def test_node_line_has_hardware_from_facts_with_a_memory_margin():
    line = node_line("gpu01", "10.10.1.11", FACTS, 5, "h100_sxm5_80gb", 8)
    assert line == ("NodeName=gpu01 NodeAddr=10.10.1.11 CPUs=128 Sockets=2 CoresPerSocket=32 ThreadsPerCore=2 "
                    "RealMemory=1960684 Gres=gpu:h100_sxm5_80gb:8 State=UNKNOWN")


def test_node_hostname_is_given_when_the_inventory_name_differs():
    line = node_line("node-a", "10.10.1.11", FACTS, 0, "h100", 8)
    assert line.startswith("NodeName=node-a NodeHostname=gpu01 NodeAddr=10.10.1.11 ")


def test_node_without_facts_is_an_error_not_a_missing_line():
    with pytest.raises(SlurmConfigError, match=r"gpu02: no hardware facts \(processor_vcpus"):
        node_line("gpu02", "10.10.1.12", {}, 5, "h100", 8)


def test_line_from_hostvars_uses_the_inventory_gpus_and_address():
    hostvars = {"gpu01": {"ansible_facts": FACTS, "ansible_host": "10.10.1.11", "gpu_count": 8,
                          "gpu_model": "H100-SXM5-80GB"}}
    assert "Gres=gpu:h100_sxm5_80gb:8" in node_line_from_hostvars("gpu01", hostvars, 5)
    assert gres_type("A100 80GB PCIe") == "a100_80gb_pcie"


def test_node_that_did_not_answer_keeps_its_current_line():
    current = "# header\nNodeName=gpu02 NodeAddr=10.10.1.12 CPUs=128 Gres=gpu:h100:8 State=UNKNOWN\n"
    hostvars = {"gpu02": {"ansible_host": "10.10.1.12", "gpu_count": 8, "gpu_model": "H100"}}
    assert node_line_from_hostvars("gpu02", hostvars, 5, current) == current.splitlines()[1]
    with pytest.raises(SlurmConfigError, match="gpu02: no hardware facts"):
        node_line_from_hostvars("gpu02", hostvars, 5, "NodeName=gpu022 CPUs=1")


def test_partitions_expand_all_groups_and_names():
    lines = partition_lines([{"name": "gpu", "nodes": "ALL", "default": True},
                             {"name": "debug", "nodes": ["gpu03"], "max_time": "0:30:00"},
                             {"name": "h100", "nodes": ["h100", "gpu01"]}], GROUPS["gpu_nodes"], GROUPS)
    assert lines == ["PartitionName=gpu Nodes=gpu01,gpu02,gpu03 Default=YES MaxTime=INFINITE State=UP",
                     "PartitionName=debug Nodes=gpu03 Default=NO MaxTime=0:30:00 State=UP",
                     "PartitionName=h100 Nodes=gpu01,gpu02 Default=NO MaxTime=INFINITE State=UP"]


def test_partition_with_a_node_that_is_not_a_gpu_node():
    with pytest.raises(SlurmConfigError, match="'ctl01' is not a GPU node"):
        partition_lines([{"name": "gpu", "nodes": ["ctl01"]}], GROUPS["gpu_nodes"], GROUPS)

def test_real_cluster_node_lines_have_the_fields_we_render(real_outputs: Path):
    text = (real_outputs / "slurm" / "nodes_partitions.conf_xjhpc_h100x8_excerpt.conf").read_text()
    real = next(line for line in text.splitlines() if line.startswith("NodeName=") and "Gres=gpu:" in line)
    ours = node_line("gpu01", "10.10.1.11", FACTS, 5, "h100", 8)
    keys = {field.split("=")[0] for field in ours.split()}
    # the real file counts sockets per board; we write Sockets, its equivalent on one board
    assert {field.split("=")[0] for field in real.split()} - {"Boards", "SocketsPerBoard"} <= keys
