"""Which CUDA builds run where: PyTorch's CUDA build against the driver, the GPU's architecture.

One home for the facts the inventory check, the certification role and the GPU bench share:
- the oldest driver each CUDA major runs on (minor version compatibility), from NVIDIA's
  CUDA Toolkit release notes, "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor
  Version Compatibility" (Linux x86_64: 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580.65.06);
- the CUDA release of the torch wheel PyPI serves for Linux x86_64, per torch minor, from
  PyTorch's release matrices (RELEASE.md and its CUDA-matrix RFCs: 2.5 "CUDA 12.4 as main binary
  on pypi", 2.7 CUDA 12.6, 2.8-2.11 CUDA 12.8, 2.12 and 2.13 CUDA 13.0, 2.14 CUDA 13.2);
  a version outside the table must state its build (certification_torch_cuda);
- the compute capability of each GPU family, which nccl-tests is compiled for (NVCC_GENCODE).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# CUDA major -> the oldest Linux driver its runtime runs on.
MIN_DRIVER_BY_CUDA_MAJOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
# torch major.minor -> the CUDA release of PyPI's Linux x86_64 wheel.
PYPI_TORCH_CUDA: dict[str, str] = {
    "2.5": "12.4", "2.6": "12.4", "2.7": "12.6", "2.8": "12.8", "2.9": "12.8", "2.10": "12.8", "2.11": "12.8",
    "2.12": "13.0", "2.13": "13.0", "2.14": "13.2",
}
# The build of each CUDA major PyTorch's index keeps for older drivers (cu126: 2.7 to 2.14).
LEGACY_INDEX_BY_MAJOR: dict[int, str] = {11: "cu118", 12: "cu126"}
# GPU family (the start of an inventory gpu_model, upper case) -> compute capability. Longest
# prefix first: "A100" before "A10", "L40S" before "L40" before "L4", "GH200" before "H200".
CUDA_ARCH_BY_MODEL: dict[str, str] = {
    "GB300": "103", "B300": "103", "GB200": "100", "B200": "100", "B100": "100",
    "GH200": "90", "H200": "90", "H100": "90", "H800": "90", "H20": "90",
    "L40S": "89", "L40": "89", "L4": "89", "RTX6000ADA": "89",
    "A100": "80", "A800": "80", "A30": "80", "A40": "86", "A10": "86", "A16": "86", "A2": "86",
}
# The first CUDA release whose nvcc compiles for each compute capability.
MIN_CUDA_FOR_ARCH: dict[str, str] = {"80": "11.0", "86": "11.1", "89": "11.8", "90": "11.8", "100": "12.8",
                                     "103": "12.9"}
_LOCAL_CUDA = re.compile(r"\+cu(\d{2,3})$")
_INDEX_CUDA = re.compile(r"/whl/(?:nightly/|test/)?cu(\d{2,3})/?$")
_INDEX_CPU = re.compile(r"/whl/(?:nightly/|test/)?cpu/?$")


@dataclass(frozen=True)
class TorchBuild:
    """The CUDA release ("12.6", or "cpu") torch is built for, and how that was found."""

    cuda: str
    source: str

    @property
    def major(self) -> int | None:
        return None if self.cuda == "cpu" else int(self.cuda.split(".")[0])


def _release(digits: str) -> str:
    """'126' -> '12.6', '130' -> '13.0', '118' -> '11.8'."""
    return f"{digits[:-1]}.{digits[-1]}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def torch_pin(pip_packages: list[str]) -> str | None:
    """The exact version of torch among the pins ('2.13.0', '2.6.0+cu126'), None without one."""
    for pin in pip_packages:
        name, _, version = str(pin).partition("==")
        if name.strip().lower() == "torch" and version:
            return version.strip()
    return None


def torch_builds(pip_packages: list[str], extra_index_url: str = "", stated: str = "") -> list[TorchBuild]:
    """The CUDA builds the pins may install: the stated one (certification_torch_cuda), the pin's
    local version (torch==2.13.0+cu126), else PyPI's wheel of that torch minor and, with an extra
    index (.../whl/cu126), that index's: a plain pin takes the index's wheel where the index
    carries that version and PyPI's where it does not. Empty when torch is not pinned or its
    minor is not in the table."""
    if stated:
        return [TorchBuild(str(stated), "certification_torch_cuda")]
    version = torch_pin(pip_packages)
    if version is None:
        return []
    if version.endswith("+cpu"):
        return [TorchBuild("cpu", f"torch=={version}")]
    if match := _LOCAL_CUDA.search(version):
        return [TorchBuild(_release(match.group(1)), f"torch=={version}")]
    minor = ".".join(version.split("+")[0].split(".")[:2])
    if minor not in PYPI_TORCH_CUDA:
        return []
    builds = []
    if extra_index_url and (match := _INDEX_CUDA.search(extra_index_url)):
        builds.append(TorchBuild(_release(match.group(1)), f"the extra index {extra_index_url}"))
    elif extra_index_url and _INDEX_CPU.search(extra_index_url):
        builds.append(TorchBuild("cpu", f"the extra index {extra_index_url}"))
    builds.append(TorchBuild(PYPI_TORCH_CUDA[minor], f"PyPI's Linux wheel of torch {minor}, which a plain pin "
                             "installs wherever the extra index lacks that version" if builds else
                             f"PyPI's Linux wheel of torch {minor}"))
    return builds


def torch_driver_problem(pip_packages: list[str], driver_version: str, extra_index_url: str = "",
                         stated: str = "") -> str | None:
    """Why the pinned torch cannot use the GPUs under the pinned driver, or None when it can."""
    if stated and not re.fullmatch(r"cpu|\d{2}\.\d", str(stated)):
        return f"certification_torch_cuda {stated!r} is not a CUDA release such as \"12.6\" or \"13.0\""
    version = torch_pin(pip_packages)
    builds = torch_builds(pip_packages, extra_index_url, stated)
    if not builds:
        if version is None:
            return "certification_pip_packages pins no torch (torch==<version>)"
        return (f"torch=={version}: which CUDA release its wheel is built for is not known here; state it with "
                f"certification_torch_cuda (e.g. \"12.6\"), or pin a local version such as torch=={version}+cu126 "
                "with PyTorch's index")
    for build in builds:
        if build.major is None:
            return (f"torch is a CPU build ({build.source}) but the node's GPUs must run the certification: pin a "
                    "CUDA build, or set certification_require_cuda: false")
        minimum = MIN_DRIVER_BY_CUDA_MAJOR.get(build.major)
        if minimum is None:
            return f"no minimum driver is known for CUDA {build.cuda} ({build.source})"
        if driver_version and _version_key(driver_version) >= _version_key(minimum):
            continue
        runs = [major for major, oldest in MIN_DRIVER_BY_CUDA_MAJOR.items()
                if driver_version and _version_key(driver_version) >= _version_key(oldest)]
        hint = ""
        if runs and max(runs) in LEGACY_INDEX_BY_MAJOR:
            index = LEGACY_INDEX_BY_MAJOR[max(runs)]
            plain = (version or "").split("+")[0]
            hint = (f"; driver {driver_version} runs CUDA {max(runs)} builds: pin torch=={plain}+{index}"
                    f" with certification_pip_extra_index_url: https://download.pytorch.org/whl/{index}")
        return (f"torch built for CUDA {build.cuda} ({build.source}) needs driver {minimum} or newer but "
                f"gpu_driver_version is {driver_version or 'not set'}: pin a driver of {minimum} or newer, or a "
                f"torch built for an older CUDA{hint}")
    return None


def cuda_arch(gpu_model: str) -> str:
    """The compute capability of an inventory gpu_model ('H100-SXM5-80GB' -> '90'), '' if unknown."""
    name = re.sub(r"[^A-Z0-9]", "", str(gpu_model).upper().removeprefix("NVIDIA"))
    for prefix in sorted(CUDA_ARCH_BY_MODEL, key=len, reverse=True):
        if name.startswith(prefix):
            return CUDA_ARCH_BY_MODEL[prefix]
    return ""


def nvcc_gencode(arch: str) -> str:
    """nvcc's flag for one compute capability: '90' -> '-gencode=arch=compute_90,code=sm_90'."""
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def arch_problem(arch: str, cuda_release: str) -> str | None:
    """Why nvcc of this CUDA release cannot compile for the architecture, or None."""
    minimum = MIN_CUDA_FOR_ARCH.get(str(arch))
    if minimum and cuda_release and _version_key(cuda_release) < _version_key(minimum):
        return f"sm_{arch} needs CUDA {minimum} or newer; the pinned compiler is CUDA {cuda_release}"
    return None


def ldd_missing(ldd_output: str) -> list[str]:
    """The libraries ldd could not find ('libnccl.so.2 => not found' -> 'libnccl.so.2')."""
    return [line.split("=>")[0].strip() for line in ldd_output.splitlines() if re.search(r"=>\s*not found", line)]
