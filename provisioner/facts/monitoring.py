"""What the monitoring host is told about the cluster: scrape targets, alert routing, dashboards.

Everything here is rendered from the whole inventory (a `--limit` run must keep every
node's targets), and labels every node's series with what an operator acts on: the host,
its Slurm node name and partitions, and its GPU model. An alert then names the node to
drain. The checks of a running stack (targets down, exporters missing GPUs) live here too.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import re
from typing import Any

import bcrypt

from provisioner.facts import slurm_config
from provisioner.parsers import parse_dcgm_metrics

# Panel sizes on Grafana's 24-column grid.
_GRID_WIDTH = 24
_PANEL_HEIGHT = {"stat": 4, "timeseries": 8, "table": 8}
_PANEL_WIDTH = {"stat": 6, "timeseries": 12, "table": 24}


class MonitoringConfigError(ValueError):
    """The inventory cannot be turned into a monitoring configuration."""


def node_partitions(partitions: list[dict[str, Any]], gpu_nodes: list[str],
                    groups: dict[str, list[str]]) -> dict[str, list[str]]:
    """Slurm partitions of every GPU node, in the order they are declared."""
    found: dict[str, list[str]] = {node: [] for node in gpu_nodes}
    for partition in partitions or []:
        for node in slurm_config.partition_nodes(partition.get("nodes", "ALL"), list(gpu_nodes), groups):
            found[node].append(str(partition["name"]))
    return found


def scrape_targets(hosts: list[str], hostvars: Any, port: int, gpu_nodes: list[str],
                   partitions: list[dict[str, Any]], groups: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Prometheus file_sd entries, one per host: `address:port`, with the labels instance and
    host (the inventory name), slurm_node and partition (GPU nodes) and gpu_model.

    The address is the host's `monitoring_scrape_address`, else its `ansible_host`, else its
    name. Hosts come from the inventory, never from facts, so an unreachable node keeps its
    target (and its alert)."""
    member_of = node_partitions(partitions, list(gpu_nodes), groups)
    entries = []
    for host in hosts:
        variables = hostvars[host]
        address = scrape_address(host, variables)
        labels = {"instance": host, "host": host}
        if host in gpu_nodes:
            labels["slurm_node"] = host
            labels["partition"] = ",".join(member_of.get(host, []))
            labels["gpu_model"] = str(variables.get("gpu_model") or "")
        entries.append({"targets": [f"{address}:{int(port)}"], "labels": labels})
    return entries


def scrape_address(host: str, variables: Any) -> str:
    """Where Prometheus reaches a host's exporters: monitoring_scrape_address, else ansible_host,
    else its name."""
    return str(variables.get("monitoring_scrape_address") or variables.get("ansible_host") or host)


def tls_names(hosts: list[str], hostvars: Any) -> dict[str, list[str]]:
    """The addresses each host's certificate names: where it is scraped, its management address
    (ansible_host, where its endpoints listen by default), and where they listen when the
    inventory says (monitoring_listen_address)."""
    names = {}
    for host in hosts:
        variables = hostvars[host]
        candidates = (scrape_address(host, variables), str(variables.get("ansible_host") or ""),
                      str(variables.get("monitoring_listen_address") or ""))
        names[host] = list(dict.fromkeys(a for a in candidates if a and "{{" not in a))
    return names


# Alertmanager receivers the inventory may declare: each type's required keys, and the optional ones.
RECEIVER_KEYS = {"webhook": ("url",), "slack": ("url", "channel"), "email": ("to", "from", "smarthost")}
RECEIVER_OPTIONAL = {"name", "type", "severities", "send_resolved", "auth_username", "auth_password", "require_tls"}
SEVERITIES = ("critical", "warning")


def receiver_problems(receivers: Any, text_types: tuple[type, ...] = (str,)) -> list[tuple[str, str]]:
    """What is wrong with monitoring_alert_receivers, as (key under it, message) pairs; the
    messages never show a receiver's values (URLs and passwords are secrets). text_types: what
    counts as a text value (the inventory loader adds its Vault-encrypted values)."""
    if not isinstance(receivers, list):
        return [("", "monitoring_alert_receivers must be a list of receivers")]
    problems: list[tuple[str, str]] = []
    names: set[str] = set()
    for index, receiver in enumerate(receivers):
        key = f"[{index}]"
        if not isinstance(receiver, dict):
            problems.append((key, "a receiver is a mapping {name, type, ...}"))
            continue
        name, kind = receiver.get("name"), receiver.get("type")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name == "null":
            problems.append((f"{key}.name", "a receiver needs a name of letters, digits, '.', '_' or '-' (not 'null')"))
        elif name in names:
            problems.append((f"{key}.name", f"receiver {name!r} is declared twice"))
        names.add(str(name))
        if not isinstance(kind, str) or kind not in RECEIVER_KEYS:
            shown = repr(kind) if len(repr(kind)) <= 40 else repr(kind)[:37] + "..."
            problems.append((f"{key}.type", f"{shown} is not a receiver type: webhook, slack or email"))
            continue
        for needed in RECEIVER_KEYS[kind]:
            if not isinstance(receiver.get(needed), text_types) or not receiver[needed]:
                problems.append((f"{key}.{needed}", f"a {kind} receiver needs {needed}"))
        known = sorted(RECEIVER_OPTIONAL | set(RECEIVER_KEYS[kind]))
        for extra in sorted({str(k) for k in receiver} - set(known)):
            close = difflib.get_close_matches(extra, known, n=1, cutoff=0.6)
            problems.append((f"{key}.{extra}", f"unknown key for a {kind} receiver"
                             + (f" (did you mean {close[0]!r}?)" if close else "")))
        severities = receiver.get("severities", ["critical"])
        if not isinstance(severities, list) or not severities or \
                not all(isinstance(s, str) and s in SEVERITIES for s in severities):
            problems.append((f"{key}.severities", "severities is a list of critical and/or warning"))
    return problems


def _receiver(receiver: dict[str, Any]) -> dict[str, Any]:
    kind = receiver["type"]
    send_resolved = bool(receiver.get("send_resolved", True))
    if kind == "webhook":
        return {"name": receiver["name"], "webhook_configs": [{"url": receiver["url"],
                                                               "send_resolved": send_resolved}]}
    if kind == "slack":
        config = {"api_url": receiver["url"], "channel": receiver["channel"], "send_resolved": send_resolved,
                  "title": '{{ .CommonLabels.alertname }} on {{ .CommonLabels.instance }}',
                  "text": '{{ range .Alerts }}{{ .Annotations.summary }}\n{{ end }}'}
        return {"name": receiver["name"], "slack_configs": [config]}
    if kind == "email":
        config = {"to": receiver["to"], "from": receiver["from"], "smarthost": receiver["smarthost"],
                  "require_tls": bool(receiver.get("require_tls", True)), "send_resolved": send_resolved}
        if receiver.get("auth_username"):
            config["auth_username"] = receiver["auth_username"]
            config["auth_password"] = receiver.get("auth_password", "")
        return {"name": receiver["name"], "email_configs": [config]}
    raise MonitoringConfigError(f"alert receiver {receiver.get('name')!r}: unknown type {kind!r} "
                                "(webhook, slack or email)")


def alertmanager_config(receivers: list[dict[str, Any]], group_wait: str, group_interval: str,
                        repeat_interval: str) -> dict[str, Any]:
    """alertmanager.yml: every receiver gets the alerts of its severities (all by default);
    with no receiver, alerts stay visible in Alertmanager's API and UI only.

    NodeDown silences the alerts a dead node causes (its exporters, its GPUs); a critical
    XID silences the warning for the same GPU."""
    routes = []
    for receiver in receivers or []:
        severities = receiver.get("severities") or ["critical", "warning"]
        routes.append({"receiver": receiver["name"], "matchers": [f'severity=~"{"|".join(severities)}"'],
                       "continue": True})
    return {
        "route": {"receiver": "null", "group_by": ["alertname", "instance"], "group_wait": group_wait,
                  "group_interval": group_interval, "repeat_interval": repeat_interval, "routes": routes},
        "inhibit_rules": [
            {"source_matchers": ['alertname="NodeDown"'],
             "target_matchers": ['alertname=~"DCGMExporterDown|GPUMissing|InfiniBandPort.*"'],
             "equal": ["instance"]},
            {"source_matchers": ['alertname="GPUXidCritical"'], "target_matchers": ['alertname="GPUXidError"'],
             "equal": ["instance", "gpu"]},
        ],
        "receivers": [{"name": "null"}, *(_receiver(receiver) for receiver in receivers or [])],
    }


def grafana_dashboard(spec: dict[str, Any], datasource_uid: str) -> dict[str, Any]:
    """A Grafana dashboard (schema 39) from a compact spec: uid, title, optional `host`
    variable, and rows of panels {title, type (timeseries, stat, table), unit, targets:
    [{expr, legend}]}. Panels fill the rows left to right; ids are unique."""
    datasource = {"type": "prometheus", "uid": datasource_uid}
    panels: list[dict[str, Any]] = []
    y = 0
    panel_id = 1
    for row in spec["rows"]:
        panels.append({"id": panel_id, "type": "row", "title": row["title"], "collapsed": False,
                       "gridPos": {"x": 0, "y": y, "w": _GRID_WIDTH, "h": 1}, "panels": []})
        panel_id += 1
        y += 1
        x = 0
        row_height = 0
        for panel in row["panels"]:
            kind = panel.get("type", "timeseries")
            width, height = _PANEL_WIDTH[kind], _PANEL_HEIGHT[kind]
            if x + width > _GRID_WIDTH:
                x, y, row_height = 0, y + row_height, 0
            targets = [{"refId": chr(ord("A") + index), "datasource": datasource, "expr": target["expr"],
                        "legendFormat": target.get("legend", ""), "instant": kind == "table",
                        "format": "table" if kind == "table" else "time_series"}
                       for index, target in enumerate(panel["targets"])]
            panels.append({"id": panel_id, "type": kind, "title": panel["title"], "datasource": datasource,
                           "description": panel.get("description", ""),
                           "gridPos": {"x": x, "y": y, "w": width, "h": height},
                           "fieldConfig": {"defaults": {"unit": panel.get("unit", "short")}, "overrides": []},
                           "options": {}, "targets": targets})
            panel_id += 1
            x += width
            row_height = max(row_height, height)
        y += row_height
    variables = []
    if spec.get("host_variable"):
        variables.append({"name": "host", "label": "Node", "type": "query", "datasource": datasource,
                          "query": {"query": spec["host_variable"], "refId": "host"},
                          "definition": spec["host_variable"], "refresh": 2, "includeAll": True, "multi": True,
                          "current": {}, "sort": 1})
    return {"uid": spec["uid"], "title": spec["title"], "tags": ["gpu-cluster", "provision"],
            "timezone": "utc", "schemaVersion": 39, "version": 1, "editable": False,
            "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
            "templating": {"list": variables}, "annotations": {"list": []}, "panels": panels}


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of a dashboard."""
    return [(panel["title"], target["expr"]) for panel in dashboard.get("panels", [])
            for target in panel.get("targets", [])]


def dcgm_counter_fields(csv_text: str) -> list[str]:
    """DCGM field names of a dcgm-exporter collectors CSV (comments and blank lines skipped)."""
    fields = []
    for line in csv_text.splitlines():
        text = line.strip()
        if text and not text.startswith("#"):
            fields.append(text.split(",", 1)[0].strip())
    return fields


def dcgm_exporter_problems(metrics_text: str, expected_gpus: int, fields: list[str]) -> list[str]:
    """What is wrong with a node's dcgm-exporter scrape: GPUs missing (counted by the
    GPU temperature series) or configured fields it does not export."""
    samples = parse_dcgm_metrics(metrics_text)["samples"]
    names = {sample["name"] for sample in samples}
    gpus = {sample["labels"].get("gpu") for sample in samples if sample["name"] == "DCGM_FI_DEV_GPU_TEMP"}
    problems = []
    if len(gpus) != expected_gpus:
        problems.append(f"dcgm-exporter reports {len(gpus)} GPU(s), the inventory declares {expected_gpus}")
    missing = [field for field in fields if field not in names]
    if missing:
        problems.append(f"dcgm-exporter does not export {', '.join(missing)}")
    return problems


def target_problems(active_targets: list[dict[str, Any]], expected: dict[str, list[str]]) -> list[dict[str, str]]:
    """Rows {job, host, health, error} for each expected target (job -> hosts) that Prometheus
    does not scrape successfully, from /api/v1/targets' activeTargets."""
    seen = {(target["labels"].get("job"), target["labels"].get("instance")): target for target in active_targets}
    rows = []
    for job, hosts in expected.items():
        for host in hosts:
            target = seen.get((job, host))
            if target is None:
                rows.append({"job": job, "host": host, "health": "absent", "error": "not in the scrape configuration"})
            elif target.get("health") != "up":
                rows.append({"job": job, "host": host, "health": str(target.get("health")),
                             "error": str(target.get("lastError") or "")})
    return rows


BCRYPT_COST = 10
_BCRYPT_ALPHABET = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def web_password_hash(password: str, cluster: str) -> str:
    """The bcrypt hash of the endpoints' basic-auth password for their web configuration.

    Its salt is derived from the password and the cluster's name, so the hash (and the file
    holding it) stays the same from run to run instead of restarting every exporter; it is
    still unique to the cluster. Cost 10: the exporters cache a verified password."""
    seed = hmac.new(str(password).encode(), f"provision web config {cluster}".encode(), hashlib.sha256).digest()
    salt = "".join(_BCRYPT_ALPHABET[byte % 64] for byte in seed[:21]) + _BCRYPT_ALPHABET[seed[21] % 4 * 16]
    return bcrypt.hashpw(str(password).encode(), f"$2b${BCRYPT_COST:02d}${salt}".encode()).decode()
