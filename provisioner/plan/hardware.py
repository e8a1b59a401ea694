"""Nominal hardware figures the sizing uses, each with its source.

GPU figures are per GPU from NVIDIA's datasheets (dense bf16 Tensor Core throughput, i.e. without
the 2:4 sparsity figure the datasheets print first). Link and fabric figures are nominal line rates
per direction; measured busbw (`--certification`) replaces them where a certification run exists.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gb: float
    memory_bandwidth_tbps: float
    bf16_dense_tflops: float
    nvlink: str
    source: str
    fp8_dense_tflops: float = 0.0  # 0: no fp8 Tensor Cores
    nvlink_domain: int = 0  # GPUs one NVLink fabric joins, where more than a node's (GB200 NVL72)


GPUS = {
    "A100-40GB": Gpu("A100-40GB", 40, 1.555, 312, "nvlink3", "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB)"),
    "A100-80GB": Gpu("A100-80GB", 80, 2.039, 312, "nvlink3", "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB)"),
    "H100": Gpu("H100", 80, 3.35, 989, "nvlink4", "NVIDIA H100 Tensor Core GPU datasheet (SXM5)", 1979),
    "H200": Gpu("H200", 141, 4.8, 989, "nvlink4", "NVIDIA H200 Tensor Core GPU datasheet (SXM)", 1979),
    "B200": Gpu("B200", 180, 7.7, 2250, "nvlink5", "NVIDIA HGX B200 specifications (8-GPU platform figures / 8)",
                 4500),
    # A Blackwell GPU of a GB200 NVL72 rack: 72 GPUs in one NVLink domain, 4 per compute tray.
    "GB200": Gpu("GB200", 186, 8.0, 2500, "nvlink5", "NVIDIA GB200 NVL72 specifications (rack figures / 72, dense)",
                 5000, nvlink_domain=72),
    # H100's compute with NVLink cut to 400 GB/s per GPU (the export variant).
    "H800": Gpu("H800", 80, 3.35, 989, "nvlink4-h800", "NVIDIA H800 Tensor Core GPU datasheet (SXM)", 1979),
    # The Hopper GPU of a Grace Hopper superchip (the 96 GB HBM3 part; the HBM3e part has 144 GB).
    "GH200": Gpu("GH200", 96, 4.0, 989, "nvlink4", "NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3)", 1979),
}


@dataclass(frozen=True)
class Link:
    """A GPU's link into its node's fabric (NVLink/NVSwitch or PCIe): GB/s per direction per GPU."""

    name: str
    gbps_per_gpu: float
    source: str


INTRA_NODE_LINKS = {
    "nvlink3": Link("NVLink 3 (A100)", 300, "600 GB/s total per GPU, NVIDIA A100 datasheet"),
    "nvlink4": Link("NVLink 4 (H100/H200)", 450, "900 GB/s total per GPU, NVIDIA H100 datasheet"),
    "nvlink5": Link("NVLink 5 (B200)", 900, "1.8 TB/s total per GPU, NVIDIA HGX B200 specifications"),
    "nvlink4-h800": Link("NVLink 4 (H800)", 200, "400 GB/s total per GPU, NVIDIA H800 datasheet"),
    "pcie4": Link("PCIe Gen4 x16", 32, "16 GT/s x 16 lanes, PCI-SIG"),
    "pcie5": Link("PCIe Gen5 x16", 64, "32 GT/s x 16 lanes, PCI-SIG"),
}


# NCCL over TCP sockets (no RDMA) reaches well under the line rate: 4-6 GB/s busbw on 100 Gb/s
# (12.5 GB/s) between 4 x 8 V100 nodes at best (NVIDIA/nccl#450), at most 60 % of wire speed on
# 32 Gb/s (NVIDIA/nccl#209). The share taken for a TCP fabric:
TCP_SHARE_OF_LINE_RATE = 0.45


@dataclass(frozen=True)
class Fabric:
    """An inter-node fabric: line rate per port (one HCA or NIC per port)."""

    name: str
    gbit_per_port: int
    rdma: bool

    @property
    def gbyte_per_port(self) -> float:
        """What NCCL gets per port: the line rate with RDMA, TCP_SHARE_OF_LINE_RATE of it over TCP."""
        return self.gbit_per_port / 8 * (1.0 if self.rdma else TCP_SHARE_OF_LINE_RATE)

    @property
    def description(self) -> str:
        return self.name if self.rdma else f"{self.name} (TCP: {TCP_SHARE_OF_LINE_RATE:.0%} of the line rate)"


FABRICS = {
    "ib-hdr": Fabric("InfiniBand HDR", 200, True),
    "ib-ndr": Fabric("InfiniBand NDR", 400, True),
    "ib-xdr": Fabric("InfiniBand XDR", 800, True),
    "roce-200": Fabric("RoCE 200 Gb/s", 200, True),
    "roce-400": Fabric("RoCE 400 Gb/s", 400, True),
    "eth-100": Fabric("Ethernet 100 Gb/s", 100, False),
    "eth-200": Fabric("Ethernet 200 Gb/s", 200, False),
    "eth-400": Fabric("Ethernet 400 Gb/s", 400, False),
}
# Inventory fabric + port rate (Gb/s) -> the fabric above.
_INVENTORY_FABRICS = {("infiniband", 200): "ib-hdr", ("infiniband", 400): "ib-ndr", ("infiniband", 800): "ib-xdr",
                      ("roce", 200): "roce-200", ("roce", 400): "roce-400", ("ethernet", 100): "eth-100",
                      ("ethernet", 200): "eth-200", ("ethernet", 400): "eth-400"}


def gpu_for_model(model: str) -> Gpu | None:
    """The table's GPU for an inventory gpu_model such as H100-SXM5-80GB or A100-SXM4-40GB."""
    upper = model.upper()
    if upper in GPUS:
        return GPUS[upper]
    if "A100" in upper:
        return GPUS["A100-40GB" if "40GB" in upper else "A100-80GB"]
    # The longer names first: GH200 holds "H200", and it is not an H200.
    for key in ("GH200", "GB200", "H200", "H800", "H100", "B200"):
        if key in upper:
            return GPUS[key]
    return None


def fabric_for_inventory(fabric: str, port_rate_gbit: int) -> str | None:
    return _INVENTORY_FABRICS.get((fabric, port_rate_gbit))
