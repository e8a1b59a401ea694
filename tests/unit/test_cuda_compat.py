"""PyTorch's CUDA build against the driver, the GPU architecture nccl-tests is built for, ldd."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner.cli import main
from provisioner.facts.cuda_compat import (
    arch_problem,
    cuda_arch,
    ldd_missing,
    nvcc_gencode,
    torch_builds,
    torch_driver_problem,
)
from tests.helpers import edit_yaml, one_problem

INDEX_126 = "https://download.pytorch.org/whl/cu126"


def test_pypi_torch_2_13_is_a_cuda_13_build_that_driver_535_cannot_run():
    problem = torch_driver_problem(["torch==2.13.0", "numpy==2.4.6"], "535.161.08")
    assert problem is not None
    assert "CUDA 13.0" in problem and "580.65.06" in problem and "535.161.08" in problem
    # What to change: a newer driver, or the CUDA 12 build with its index.
    assert "torch==2.13.0+cu126" in problem and INDEX_126 in problem


def test_a_plain_pin_with_an_extra_index_may_still_take_pypis_wheel():
    builds = torch_builds(["torch==2.13.0"], INDEX_126)
    assert [build.cuda for build in builds] == ["12.6", "13.0"]
    assert "lacks that version" in torch_driver_problem(["torch==2.13.0"], "535.161.08", INDEX_126)


@pytest.mark.parametrize(("pins", "driver", "index", "stated"), [
    (["torch==2.13.0+cu126"], "535.161.08", INDEX_126, ""),
    (["torch==2.13.0"], "580.95.05", "", ""),
    (["torch==2.7.1"], "535.161.08", "", ""),  # PyPI's 2.7 wheel: CUDA 12.6
    (["torch==2.3.0"], "535.161.08", "", "12.1"),  # outside the table, stated
    (["torch==2.13.0"], "535.161.08", "", "12.6"),  # a wheelhouse of CUDA 12.6 builds
])
def test_builds_the_driver_runs_pass(pins, driver, index, stated):
    assert torch_driver_problem(pins, driver, index, stated) is None


def test_unknown_torch_asks_for_its_build_and_a_cpu_build_is_refused():
    assert "certification_torch_cuda" in torch_driver_problem(["torch==2.3.0"], "535.161.08")
    assert "CPU build" in torch_driver_problem(["torch==2.13.0+cpu"], "580.95.05")
    assert "pins no torch" in torch_driver_problem(["numpy==2.4.6"], "580.95.05")
    assert "not a CUDA release" in torch_driver_problem(["torch==2.13.0"], "580.95.05", stated="cu126")
    assert "CUDA 13.2" in torch_driver_problem(["torch==2.14.0"], "575.57.08")


@pytest.mark.parametrize(("model", "arch"), [
    ("H100-SXM5-80GB", "90"), ("H200-SXM-141GB", "90"), ("GH200-480GB", "90"), ("A100-SXM4-40GB", "80"),
    ("A10G", "86"), ("L40S", "89"), ("L4", "89"), ("B200", "100"), ("NVIDIA GB200", "100"), ("MI300X", ""),
])
def test_gpu_model_gives_the_architecture(model, arch):
    assert cuda_arch(model) == arch


def test_gencode_and_the_compiler_the_architecture_needs():
    assert nvcc_gencode("90") == "-gencode=arch=compute_90,code=sm_90"
    assert arch_problem("100", "12.2") == "sm_100 needs CUDA 12.8 or newer; the pinned compiler is CUDA 12.2"
    assert arch_problem("90", "12.2") is None


def test_ldd_names_the_missing_libraries():
    output = ("\tlinux-vdso.so.1 (0x00007ffd)\n\tlibnccl.so.2 => not found\n"
              "\tlibcudart.so.12 => /usr/local/cuda/lib64/libcudart.so.12 (0x00007f)\n\tlibmpi.so.40 => not found\n")
    assert ldd_missing(output) == ["libnccl.so.2", "libmpi.so.40"]
    assert ldd_missing("\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n") == []


def test_inventory_with_a_torch_the_driver_cannot_run_is_refused(example_inventory: Path, capsys):
    edit_yaml(example_inventory / "group_vars/all.yml", lambda d: d.pop("certification_pip_packages"))
    problem = one_problem(example_inventory, "all.yml", "gpu_driver_version", "CUDA 13.0")
    assert "580.65.06" in problem
    assert main(["inventory", "validate", "--inventory", str(example_inventory)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_node_that_does_not_need_its_gpus_is_not_checked(example_inventory: Path):
    def cpu_only(document: dict) -> None:
        document.pop("certification_pip_packages")
        document["certification_require_cuda"] = False
    edit_yaml(example_inventory / "group_vars/all.yml", cpu_only)
    assert main(["inventory", "validate", "--inventory", str(example_inventory)]) == 0


def test_one_node_with_another_driver_is_named_once_at_its_definition(example_inventory: Path):
    host_vars = example_inventory / "host_vars"
    host_vars.mkdir(exist_ok=True)
    (host_vars / "gpu02.yml").write_text(yaml.safe_dump({"certification_pip_packages": ["torch==2.13.0"]}))
    problem = one_problem(example_inventory, "gpu02.yml", "certification_pip_packages")
    assert "CUDA 13.0" in problem
