"""Fabric verification: every port of every fabric HCA Active/LinkUp at the expected rate."""

from __future__ import annotations

from pathlib import Path

from provisioner.facts.fabric import ipoib_problems, port_problems, rdma_devices
from provisioner.facts.tables import text_table
from provisioner.parsers import PARSERS


def hca(name: str, state="Active", physical="LinkUp", rate=400, layer="InfiniBand", sm_lid=1) -> dict:
    return {"name": name, "ca_type": "MT4129", "ports": [{"port": 1, "state": state, "physical_state": physical,
                                                           "rate_gbps": rate, "link_layer": layer,
                                                           "base_lid": 7, "sm_lid": sm_lid}]}


def test_healthy_node_has_no_problems():
    ibstat = {"cas": [hca("mlx5_0"), hca("mlx5_1")]}
    assert port_problems(ibstat, "infiniband", 2, 400) == []
    assert rdma_devices(ibstat, "infiniband") == ["mlx5_0:1", "mlx5_1:1"]


def test_port_down_is_named_with_hca_port_and_state():
    ibstat = {"cas": [hca("mlx5_0"), hca("mlx5_1", state="Down", physical="Disabled", rate=10)]}
    rows = port_problems(ibstat, "infiniband", 2, 400)
    assert rows == [{"hca": "mlx5_1", "port": "1", "state": "Down", "physical": "Disabled", "rate": "10",
                     "link layer": "InfiniBand",
                     "problem": "state Down, expected Active; physical state Disabled, expected LinkUp"}]
    assert rdma_devices(ibstat, "infiniband") == ["mlx5_0:1"]


def test_degraded_rate_and_missing_subnet_manager():
    ibstat = {"cas": [hca("mlx5_0", rate=200), hca("mlx5_1", sm_lid=0)]}
    problems = {row["hca"]: row["problem"] for row in port_problems(ibstat, "infiniband", 2, 400)}
    assert problems == {"mlx5_0": "rate 200 Gb/s, expected 400", "mlx5_1": "no subnet manager (SM lid 0)"}


def test_missing_hca_is_counted_and_named_hcas_must_exist():
    ibstat = {"cas": [hca("mlx5_0")]}
    rows = port_problems(ibstat, "infiniband", 2, 400)
    assert rows[0]["problem"] == "1 InfiniBand HCAs found (mlx5_0), the inventory expects 2"
    rows = port_problems(ibstat, "infiniband", 2, 400, ["mlx5_0", "mlx5_3"])
    assert rows == [{"hca": "mlx5_3", "port": "-", "state": "-", "physical": "-", "rate": "-", "link layer": "-",
                     "problem": "HCA not found"}]


def test_roce_uses_ethernet_ports_and_ignores_infiniband_ones():
    ibstat = {"cas": [hca("mlx5_0", layer="Ethernet"), hca("mlx5_1", layer="Ethernet"), hca("mlx5_2")]}
    assert port_problems(ibstat, "roce", 2, 400) == []
    assert rdma_devices(ibstat, "roce") == ["mlx5_0:1", "mlx5_1:1"]
    assert port_problems(ibstat, "ethernet", 8, 400) == [] and rdma_devices(ibstat, "ethernet") == []


def test_real_ndr_node_with_down_ethernet_ports(real_outputs: Path):
    text = (real_outputs / "ibstat" / "ibstat_h100_cx7_ndr400_ib_3ports_down.txt").read_text()
    ibstat = PARSERS["ibstat"](text)
    assert port_problems(ibstat, "infiniband", 8, 400) == []
    assert len(rdma_devices(ibstat, "infiniband")) == 8
    rows = port_problems(ibstat, "roce", 4, 400)
    assert sum("state Down" in row["problem"] for row in rows) == 3


def test_table_aligns_the_columns():
    text = text_table([{"a": "x", "b": "long value"}, {"a": "longer", "b": "y"}], ("a", "b"))
    assert text.splitlines() == ["a       b", "x       long value", "longer  y"]
    assert text_table([], ("a",), empty="none") == "none"


def test_ipoib_interface_missing_or_without_its_address():
    ip_json = ('[{"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},'
               ' {"ifname": "ib0", "addr_info": [{"family": "inet", "local": "10.20.1.11", "prefixlen": 16},'
               ' {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]},'
               ' {"ifname": "ib1", "addr_info": []}]')
    assert ipoib_problems(ip_json, [{"name": "ib0", "address": "10.20.1.11/16"}]) == []
    assert ipoib_problems(ip_json, [{"name": "ib0", "address": "10.20.1.11/24"},
                                    {"name": "ib1", "address": "10.21.1.11/16"},
                                    {"name": "ib2", "address": "10.22.1.11/16"}]) == [
        "IPoIB interface ib0 has 10.20.1.11/16, expected 10.20.1.11/24",
        "IPoIB interface ib1 has no IPv4 address, expected 10.21.1.11/16",
        "IPoIB interface ib2 does not exist (ib_ipoib not loaded, or the HCA is missing)"]
