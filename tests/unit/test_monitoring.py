"""What the monitoring host is told: scrape targets, alert routing, dashboards, exporter checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provisioner.facts import monitoring
from provisioner.facts.fabric import fabric_ports
from provisioner.parsers import PARSERS

ROLE = Path(__file__).resolve().parents[2] / "roles" / "monitoring"
GROUPS = {"all": ["ctl01", "gpu01", "gpu02", "gpu03"], "controller": ["ctl01"], "monitoring": ["ctl01"],
          "gpu_nodes": ["gpu01", "gpu02", "gpu03"], "h100": ["gpu01", "gpu02"]}
HOSTVARS = {"ctl01": {"ansible_host": "10.0.0.1"},
            "gpu01": {"ansible_host": "10.0.0.11", "gpu_model": "H100-SXM5-80GB"},
            "gpu02": {"ansible_host": "10.0.0.12", "gpu_model": "H100-SXM5-80GB",
                      "monitoring_scrape_address": "192.168.7.12"},
            "gpu03": {"gpu_model": "A100-SXM4-80GB"}}
PARTITIONS = [{"name": "gpu", "nodes": "ALL", "default": True}, {"name": "h100", "nodes": ["h100"]},
              {"name": "debug", "nodes": ["gpu03"]}]


def test_targets_carry_host_slurm_node_partitions_and_gpu_model():
    entries = monitoring.scrape_targets(GROUPS["all"], HOSTVARS, 9100, GROUPS["gpu_nodes"], PARTITIONS, GROUPS)
    by_host = {entry["labels"]["host"]: entry for entry in entries}
    assert by_host["ctl01"] == {"targets": ["10.0.0.1:9100"], "labels": {"instance": "ctl01", "host": "ctl01"}}
    assert by_host["gpu01"]["labels"] == {"instance": "gpu01", "host": "gpu01", "slurm_node": "gpu01",
                                          "partition": "gpu,h100", "gpu_model": "H100-SXM5-80GB"}
    assert by_host["gpu02"]["targets"] == ["192.168.7.12:9100"]
    assert by_host["gpu03"]["targets"] == ["gpu03:9100"]
    assert by_host["gpu03"]["labels"]["partition"] == "gpu,debug"


def test_targets_come_from_the_inventory_not_from_the_run():
    """A limited run (or a node without facts) renders the same targets."""
    dcgm = monitoring.scrape_targets(GROUPS["gpu_nodes"], HOSTVARS, 9400, GROUPS["gpu_nodes"], PARTITIONS, GROUPS)
    assert [entry["labels"]["instance"] for entry in dcgm] == ["gpu01", "gpu02", "gpu03"]


def test_alertmanager_routes_each_receiver_its_severities_and_keeps_the_null_receiver():
    receivers = [{"name": "oncall", "type": "webhook", "url": "https://hooks.example/alert",
                  "severities": ["critical"]},
                 {"name": "chat", "type": "slack", "url": "https://hooks.slack.example/T/B/secret", "channel": "#gpu"},
                 {"name": "mail", "type": "email", "to": "ops@example.com", "from": "am@example.com",
                  "smarthost": "smtp.example.com:587", "auth_username": "am", "auth_password": "s3cret"}]
    config = monitoring.alertmanager_config(receivers, "30s", "5m", "4h")
    assert config["route"]["receiver"] == "null"
    assert config["route"]["routes"] == [
        {"receiver": "oncall", "matchers": ['severity=~"critical"'], "continue": True},
        {"receiver": "chat", "matchers": ['severity=~"critical|warning"'], "continue": True},
        {"receiver": "mail", "matchers": ['severity=~"critical|warning"'], "continue": True}]
    names = [receiver["name"] for receiver in config["receivers"]]
    assert names == ["null", "oncall", "chat", "mail"]
    assert config["receivers"][3]["email_configs"][0]["auth_password"] == "s3cret"
    rendered = yaml.safe_dump(config)
    assert "name: 'null'" in rendered  # quoted: a bare null would be YAML's null
    assert yaml.safe_load(rendered) == config


def test_unknown_receiver_type_is_refused():
    with pytest.raises(monitoring.MonitoringConfigError, match="unknown type 'pager'"):
        monitoring.alertmanager_config([{"name": "x", "type": "pager"}], "30s", "5m", "4h")


def _dashboards() -> list[dict]:
    specs = yaml.safe_load((ROLE / "files" / "dashboards.yml").read_text())
    return [monitoring.grafana_dashboard(spec, "provision-prometheus") for spec in specs]


def test_dashboards_are_valid_grafana_json_with_unique_ids_and_no_overlapping_panels():
    dashboards = _dashboards()
    assert {d["uid"] for d in dashboards} == {"gpu-cluster-overview", "gpu-node", "gpu-fabric"}
    for dashboard in dashboards:
        json.loads(json.dumps(dashboard))
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(ids) == len(set(ids))
        cells: set[tuple[int, int]] = set()
        for panel in dashboard["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24
            area = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                    for y in range(grid["y"], grid["y"] + grid["h"])}
            assert not cells & area, f"{dashboard['uid']}: panel {panel['title']!r} overlaps another"
            cells |= area
            for target in panel.get("targets", []):
                assert target["datasource"]["uid"] == "provision-prometheus" and target["expr"]


def test_node_dashboards_select_the_node():
    by_uid = {d["uid"]: d for d in _dashboards()}
    for uid in ("gpu-node", "gpu-fabric"):
        assert [v["name"] for v in by_uid[uid]["templating"]["list"]] == ["host"]
        assert all('host=~"$host"' in expr for _, expr in monitoring.panel_queries(by_uid[uid]))


def test_every_dcgm_field_the_rules_and_dashboards_use_is_exported():
    exported = set(monitoring.dcgm_counter_fields((ROLE / "files" / "dcgm-counters.csv").read_text()))
    rules = (ROLE / "files" / "rules" / "gpu-cluster.rules.yml").read_text()
    queries = " ".join(expr for d in _dashboards() for _, expr in monitoring.panel_queries(d))
    import re

    used = set(re.findall(r"DCGM_FI_[A-Z_]+", rules + queries))
    assert used and used <= exported, f"not exported: {sorted(used - exported)}"


def test_exporter_check_counts_gpus_and_fields_on_a_real_scrape(real_outputs: Path):
    text = (real_outputs / "dcgm" / "dcgm-exporter_metrics_l4_aws_kops_driver580.105.08.txt").read_text()
    assert monitoring.dcgm_exporter_problems(text, 1, ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED"]) == []
    assert monitoring.dcgm_exporter_problems(text, 8, ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]) == [
        "dcgm-exporter reports 1 GPU(s), the inventory declares 8",
        "dcgm-exporter does not export DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]


def test_target_problems_name_the_job_host_and_error():
    active = [{"labels": {"job": "node", "instance": "gpu01"}, "health": "up", "lastError": ""},
              {"labels": {"job": "dcgm", "instance": "gpu01"}, "health": "down",
               "lastError": "Get \"http://10.0.0.11:9400/metrics\": connection refused"},
              {"labels": {"job": "node", "instance": "gpu02"}, "health": "unknown", "lastError": ""}]
    rows = monitoring.target_problems(active, {"node": ["gpu01", "gpu02"], "dcgm": ["gpu01", "gpu03"]})
    assert rows == [
        {"job": "node", "host": "gpu02", "health": "unknown", "error": ""},
        {"job": "dcgm", "host": "gpu01", "health": "down",
         "error": "Get \"http://10.0.0.11:9400/metrics\": connection refused"},
        {"job": "dcgm", "host": "gpu03", "health": "absent", "error": "not in the scrape configuration"}]


def test_fabric_ports_include_down_ports_and_skip_other_link_layers(real_outputs: Path):
    text = (real_outputs / "ibstat" / "ibstat_h100_cx7_ndr400_ib_3ports_down.txt").read_text()
    ibstat = PARSERS["ibstat"](text)
    ports = fabric_ports(ibstat, "infiniband")
    infiniband = [(ca["name"], str(port["port"])) for ca in ibstat["cas"] for port in ca["ports"]
                  if port["link_layer"] == "InfiniBand"]
    assert [(p["device"], p["port"]) for p in ports] == infiniband
    # The fixture's three down ports are Ethernet ports of the same host: not the fabric's.
    down = [(ca["name"], str(port["port"])) for ca in ibstat["cas"] for port in ca["ports"]
            if port["state"] != "Active"]
    assert len(down) == 3 and not set(down) & {(p["device"], p["port"]) for p in ports}
    assert len(ports) == 8
    assert fabric_ports(ibstat, "ethernet") == []
    assert fabric_ports(ibstat, "infiniband", ["mlx5_0", "mlx5_3"]) == [{"device": "mlx5_0", "port": "1"},
                                                                        {"device": "mlx5_3", "port": "1"}]
