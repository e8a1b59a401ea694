"""The alert rules' promtool unit tests, and that every alert has a firing and a silent case."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from provisioner.facts.monitoring import dcgm_counter_fields

PROJECT = Path(__file__).resolve().parents[2]
RULES = PROJECT / "roles" / "monitoring" / "files" / "rules" / "gpu-cluster.rules.yml"
RULE_TESTS = sorted((PROJECT / "tests" / "promtool").glob("*.test.yml"))
COUNTERS = PROJECT / "roles" / "monitoring" / "files" / "dcgm-counters.csv"
EXPORTER_STANDIN = PROJECT / "provisioner" / "lab" / "packages" / "dcgm-exporter"


def _promtool() -> str:
    found = shutil.which("promtool", path=str(Path(sys.executable).parent)) or shutil.which("promtool")
    assert found, "promtool is missing: ./scripts/bootstrap.sh extracts it from Debian's prometheus package"
    return found


def _alerts() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"]]


def test_rules_pass_promtool_check():
    result = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass():
    assert RULE_TESTS
    result = subprocess.run([_promtool(), "test", "rules", *map(str, RULE_TESTS)], capture_output=True, text=True,
                            check=False, cwd=RULE_TESTS[0].parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_stays_silent():
    fires: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    alerts = set(_alerts())
    assert alerts - fires == set(), "alerts never tested firing"
    assert alerts - silent == set(), "alerts never tested silent"
    assert (fires | silent) - alerts == set(), "tests of alerts that do not exist"


def test_every_alert_names_its_node_and_has_a_severity():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for rule in (rule for group in groups for rule in group["rules"]):
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert "$labels.instance" in rule["annotations"]["summary"], rule["alert"]


def test_the_lab_exporter_knows_every_field_the_role_exports(real_outputs: Path):
    """The stand-in serves the real field names: those of a real scrape and those the role asks for."""
    loader = importlib.machinery.SourceFileLoader("lab_dcgm_exporter", str(EXPORTER_STANDIN))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    standin = importlib.util.module_from_spec(spec)
    loader.exec_module(standin)
    assert set(dcgm_counter_fields(COUNTERS.read_text())) <= set(standin.FIELDS)
    real = (real_outputs / "dcgm" / "dcgm-exporter_metrics_l4_aws_kops_driver580.105.08.txt").read_text()
    real_names = {line.split()[2] for line in real.splitlines() if line.startswith("# TYPE")}
    standin_names = set(standin.FIELDS)
    assert real_names - {"DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_ENC_UTIL",
                         "DCGM_FI_DEV_DEC_UTIL"} <= standin_names
