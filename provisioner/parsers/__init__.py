"""Parsers for vendor tools' output: plain functions, text in, JSON-ready facts out.

One parser per tool, shared by `provision inspect`, the Ansible modules and certification.
Each raises ParseError when the text is not that tool's output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provisioner.parsers.common import ParseError
from provisioner.parsers.dcgm import parse_dcgm_metrics, parse_dcgmi_diag
from provisioner.parsers.ibstat import parse_ibstat, parse_ibv_devinfo
from provisioner.parsers.mlxfw import parse_flint, parse_mlxfwmanager
from provisioner.parsers.nccl_tests import parse_nccl_tests
from provisioner.parsers.nvidia_smi import parse_nvidia_smi_csv, parse_nvidia_smi_q

PARSERS: dict[str, Callable[[str], dict[str, Any]]] = {
    "nvidia-smi": parse_nvidia_smi_q,
    "ibstat": parse_ibstat,
    "ibv_devinfo": parse_ibv_devinfo,
    "mlxfwmanager": parse_mlxfwmanager,
    "flint": parse_flint,
    "dcgmi-diag": parse_dcgmi_diag,
    "dcgm-metrics": parse_dcgm_metrics,
    "nccl-tests": parse_nccl_tests,
}

__all__ = [
    "PARSERS",
    "ParseError",
    "parse_dcgm_metrics",
    "parse_dcgmi_diag",
    "parse_flint",
    "parse_ibstat",
    "parse_ibv_devinfo",
    "parse_mlxfwmanager",
    "parse_nccl_tests",
    "parse_nvidia_smi_csv",
    "parse_nvidia_smi_q",
]
