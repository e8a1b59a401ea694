"""The driver as one file for the controller: a zip application of the few standard-library
modules it runs (the schedule, the output readers, the nccl-tests and fio parsers), copied there with
each certification so that the controller always runs the CLI's own version."""

from __future__ import annotations

import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
MODULES = ("certify/driver.py", "certify/schedule.py", "certify/outputs.py", "parsers/common.py",
           "parsers/fio.py", "parsers/nccl_tests.py", "parsers/slurm.py")
# Package markers only: the real ones import what the controller does not have.
PACKAGES = ("", "certify/", "parsers/")
MAIN = "import sys\nfrom provisioner.certify.driver import main\nsys.exit(main())\n"


def build(target: Path) -> Path:
    """Write the driver's zip application to target (run it with `python3 target ...`)."""
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("__main__.py", MAIN)
        for package in PACKAGES:
            archive.writestr(f"provisioner/{package}__init__.py", "")
        for module in MODULES:
            archive.write(PACKAGE / module, f"provisioner/{module}")
    return target
