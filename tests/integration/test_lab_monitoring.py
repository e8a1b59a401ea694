"""Monitoring on the lab: real Prometheus, Alertmanager and node_exporter, the stand-in
dcgm-exporter, alerts reaching Alertmanager from injected hardware faults, dashboards'
queries against the live Prometheus, limited runs and secrets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from provisioner.ansible.vault import forget_secrets
from provisioner.cli import main
from provisioner.lab import cluster
from provisioner.lab.state import update_state
from tests.helpers import vault_encrypt

from .conftest import LAB_GPUS, monitoring_api, node_exec, wait_for

pytestmark = pytest.mark.lab
LAB = "lab"
SERVER = "ctl01"


def _get(lab: dict[str, str], port: int, path: str, **params: str):
    return monitoring_api(lab[SERVER], port, path, **params)


def promql(lab: dict[str, str], expr: str) -> list[dict]:
    answer = _get(lab, 9090, "/api/v1/query", query=expr)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_every_target_is_up_and_labelled_with_its_slurm_node(provisioned_lab):
    up = {(r["metric"]["job"], r["metric"]["instance"]): r for r in promql(provisioned_lab, 'up{host=~".+"}')}
    assert set(up) == {("node", "ctl01"), ("node", "gpu01"), ("node", "gpu02"), ("dcgm", "gpu01"),
                       ("dcgm", "gpu02"), ("prometheus", "ctl01"), ("alertmanager", "ctl01")}
    assert {r["value"][1] for r in up.values()} == {"1"}
    labels = up[("dcgm", "gpu02")]["metric"]
    assert (labels["slurm_node"], labels["partition"], labels["gpu_model"]) == ("gpu02", "gpu,debug", "H100-SXM5-80GB")
    gpus = promql(provisioned_lab, "count by (instance) (DCGM_FI_DEV_GPU_TEMP)")
    assert {r["metric"]["instance"]: r["value"][1] for r in gpus} == {"gpu01": str(LAB_GPUS), "gpu02": str(LAB_GPUS)}
    ports = promql(provisioned_lab, "count by (instance) (node_infiniband_state_id == 4)")
    assert {r["metric"]["instance"]: r["value"][1] for r in ports} == {"gpu01": "2", "gpu02": "2"}
    # What the inventory declares matches what the exporters report: no wiring alert pending.
    wiring = 'ALERTS{alertname=~"GPUMissing|InfiniBandPort(Down|Missing)|NodeDown|DCGMExporterDown"}'
    assert promql(provisioned_lab, wiring) == []


def test_injected_faults_reach_alertmanager_naming_the_node(healthy_lab):
    """Correctable ECC errors growing on gpu02's GPU 3 and a link-down event on gpu01's mlx5_1
    (faults that do not drain the node in Slurm) arrive in Alertmanager with the node's name."""
    def ecc(state):
        state["gpus"][3]["ecc_errors"]["volatile"]["dram_correctable"] = 5

    def link_down(state):
        state["hcas"][1]["ports"][0].setdefault("counters", {})["link_downed"] = 1

    update_state(cluster.node_hw_dir("gpu02"), ecc)
    update_state(cluster.node_hw_dir("gpu01"), link_down)

    def alerts():
        found = {(a["labels"]["alertname"], a["labels"]["instance"]): a["labels"]
                 for a in _get(healthy_lab, 9093, "/api/v2/alerts", active="true")}
        wanted = {("GPUCorrectableECCErrorsGrowing", "gpu02"), ("InfiniBandLinkFlapping", "gpu01")}
        return found if wanted <= set(found) else None

    found = wait_for(alerts, 120, "the ECC and link alerts in Alertmanager", interval=2)
    ecc_alert = found[("GPUCorrectableECCErrorsGrowing", "gpu02")]
    assert (ecc_alert["gpu"], ecc_alert["slurm_node"], ecc_alert["severity"]) == ("3", "gpu02", "warning")
    assert ecc_alert["partition"] == "gpu,debug" and ecc_alert["gpu_model"] == "H100-SXM5-80GB"
    link_alert = found[("InfiniBandLinkFlapping", "gpu01")]
    assert (link_alert["device"], link_alert["port"], link_alert["slurm_node"]) == ("mlx5_1", "1", "gpu01")
    assert ("GPUCorrectableECCErrorsGrowing", "gpu01") not in found


def test_every_dashboard_query_is_accepted_and_returns_series(provisioned_lab):
    listing = node_exec(SERVER, "sh", "-c", "ls /var/lib/grafana/dashboards/provision/*.json")
    paths = listing.stdout.split()
    assert len(paths) == 3, listing.stderr
    datasource = yaml.safe_load(node_exec(SERVER, "cat", "/etc/grafana/provisioning/datasources/provision.yml").stdout)
    uid = datasource["datasources"][0]["uid"]
    empty = []
    for path in paths:
        dashboard = json.loads(node_exec(SERVER, "cat", path).stdout)
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                assert target["datasource"]["uid"] == uid
                expr = target["expr"].replace("$host", ".+").replace("$__rate_interval", "1m")
                if not promql(provisioned_lab, expr):
                    empty.append(f"{dashboard['uid']} / {panel['title']}: {expr}")
    assert empty == [], "queries without series:\n" + "\n".join(empty)


def _vaulted(text: str, password: str, indent: int) -> str:
    blob = vault_encrypt(text, password)
    return "!vault |\n" + "".join(" " * indent + line + "\n" for line in blob.splitlines())


def test_limited_run_keeps_every_target_and_never_logs_the_receiver_secrets(provisioned_lab, tmp_path: Path,
                                                                             monkeypatch):
    # Vault-encrypted receivers, as the example inventory recommends: a !vault URL, a Slack URL
    # through a variable of an encrypted vault.yml, an email relay's vaulted password.
    password = "lab-vault-password-0d41"
    (tmp_path / "vault-pass").write_text(password + "\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(tmp_path / "vault-pass"))
    forget_secrets()
    secrets = {"webhook": "https://hooks.invalid/oncall/wh-7e21a9c4", "slack": "https://hooks.slack.invalid/T0/sl-93be",
               "smtp": "smtp-pa55-b71f"}
    host_vars = cluster.lab_inventory_dir() / "host_vars"
    (host_vars / "ctl01").mkdir(parents=True, exist_ok=True)
    (host_vars / "ctl01" / "receivers.yml").write_text(
        "monitoring_alert_receivers:\n"
        f"  - name: oncall\n    type: webhook\n    url: {_vaulted(secrets['webhook'], password, 6)}"
        "  - name: chat\n    type: slack\n    channel: '#gpu-alerts'\n    url: '{{ vault_slack_url }}'\n"
        "  - name: mail\n    type: email\n    to: oncall@example.invalid\n    from: lab@example.invalid\n"
        "    smarthost: smtp.example.invalid:587\n    auth_username: lab\n"
        f"    auth_password: {_vaulted(secrets['smtp'], password, 6)}")
    (host_vars / "ctl01" / "vault.yml").write_text(vault_encrypt(f"vault_slack_url: {secrets['slack']}\n", password))
    try:
        assert main(["apply", "--inventory", LAB, "--limit", SERVER, "--tags", "monitoring"]) == 0
        targets = yaml.safe_load(node_exec(SERVER, "cat", "/etc/prometheus/targets/dcgm.yml").stdout)
        assert [entry["labels"]["instance"] for entry in targets] == ["gpu01", "gpu02"]
        config = node_exec(SERVER, "cat", "/etc/prometheus/alertmanager.yml").stdout
        assert all(value in config for value in secrets.values())  # Ansible decrypted them
        status = _get(provisioned_lab, 9093, "/api/v2/status")
        assert "chat" in status["config"]["original"]
        leaked = [f"{path}: {name}" for path in (tmp_path / "runs").rglob("*") if path.is_file()
                  for name, value in secrets.items() if value in path.read_text(errors="replace")]
        assert leaked == []
    finally:
        shutil.rmtree(host_vars)
        monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE")
        forget_secrets()
        assert main(["apply", "--inventory", LAB, "--limit", SERVER, "--tags", "monitoring"]) == 0


PROBE = """
import json, ssl, sys, urllib.request, urllib.error
url, method = sys.argv[1], sys.argv[2]
context = ssl.create_default_context(); context.check_hostname = False; context.verify_mode = ssl.CERT_NONE
silence = {"matchers": [{"name": "alertname", "value": ".+", "isRegex": True}], "createdBy": "x",
           "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2030-01-01T00:00:00Z", "comment": "mute"}
data = json.dumps(silence).encode() if method == "POST" else None
request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(request, timeout=5, context=context).status)
except urllib.error.HTTPError as error:
    print(error.code)
except Exception as error:
    print("refused", type(error).__name__)
"""


def test_an_unauthenticated_request_from_another_node_is_refused(provisioned_lab):
    """From a GPU node on the management network: no silence, no API, no metrics without the
    password, and nothing in plain HTTP; Prometheus itself still scrapes every target."""
    server, gpu02 = provisioned_lab[SERVER], provisioned_lab["gpu02"]
    for url, method in [(f"https://{server}:9093/api/v2/silences", "POST"),
                        (f"https://{server}:9093/api/v2/status", "GET"),
                        (f"https://{server}:9090/api/v1/targets", "GET"), (f"https://{gpu02}:9100/metrics", "GET")]:
        answer = node_exec("gpu01", "python3", "-c", PROBE, url, method).stdout.strip()
        assert answer == "401", f"{method} {url}: {answer}"
    for url in (f"http://{server}:9090/api/v1/targets", f"http://{gpu02}:9100/metrics"):
        answer = node_exec("gpu01", "python3", "-c", PROBE, url, "GET").stdout.strip()
        assert answer != "200", f"plain HTTP answered: {url}"
    # Listening on the management address only: not on the server's loopback.
    loopback = node_exec(SERVER, "python3", "-c", PROBE, "https://127.0.0.1:9090/-/ready", "GET").stdout
    assert loopback.startswith("refused"), loopback
    targets = monitoring_api(server, 9090, "/api/v1/targets")["data"]["activeTargets"]
    assert targets and all(t["health"] == "up" for t in targets), [(t["scrapeUrl"], t["lastError"]) for t in targets]
