"""The certification's reports: certification.json, JUnit XML, and an HTML page with plots."""

from __future__ import annotations

import html
import io
import json
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

from provisioner.ansible.records import write_private

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def write_json(path: Path, document: dict[str, Any]) -> Path:
    return write_private(path, json.dumps(document, indent=2) + "\n")


def write_junit(path: Path, document: dict[str, Any]) -> Path:
    """One test suite per node (plus `fleet`), one test case per check covering it."""
    suites = ET.Element("testsuites", name=f"certification {document['cluster']}")
    for node in [*document["nodes"], "fleet"]:
        checks = [c for c in document["checks"] if (node in c["nodes"]) or (node == "fleet" and len(c["nodes"]) > 1)]
        if node != "fleet":
            checks = [c for c in checks if len(c["nodes"]) == 1 or node in c["blamed"]]
        suite = ET.SubElement(suites, "testsuite", name=node, tests=str(len(checks)),
                              failures=str(sum(not c["passed"] for c in checks)))
        for check in checks:
            case = ET.SubElement(suite, "testcase", classname=f"certify.{node}", name=check["name"])
            text = (f"measured {check['measured']} {check['unit']}, threshold {check['threshold']}; "
                    f"{check['detail']}").strip()
            if not check["passed"]:
                failure = ET.SubElement(case, "failure", message=text[:300])
                failure.text = text
            else:
                ET.SubElement(case, "system-out").text = text
    ET.indent(suites)
    write_private(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True))
    return path


def _svg(figure: plt.Figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _bandwidth_plot(curves: list[dict[str, Any]], instrument: str) -> str | None:
    mine = [c for c in curves if c["instrument"] == instrument]
    if not mine:
        return None
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for curve in mine:
        label = {"node": curve["nodes"][0], "all": "all nodes"}.get(curve["scope"], "+".join(curve["nodes"]))
        axis.plot(curve["sizes_bytes"], curve["busbw_gbps"], marker="o", label=f"{curve['scope']}: {label}")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("message size (bytes)")
    axis.set_ylabel("busbw (GB/s)")
    axis.set_title(f"{instrument}: all_reduce busbw by message size")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small")
    return _svg(figure)


def _by_value(per_node: dict[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for node, value in per_node.items():
        grouped.setdefault(value, []).append(node)
    return grouped


def _training_plots(training: dict[str, Any]) -> list[str]:
    if not training.get("mean_loss"):
        return []
    figure, axis = plt.subplots(figsize=(8, 4))
    axis.plot(range(len(training["mean_loss"])), training["mean_loss"])
    axis.set_xlabel("step")
    axis.set_ylabel("loss (mean over ranks)")
    axis.set_title("smoke training: loss")
    axis.grid(True, alpha=0.3)
    plots = [_svg(figure)]
    if training.get("step_time_s"):
        figure, axis = plt.subplots(figsize=(8, 4))
        axis.hist([t * 1000 for t in training["step_time_s"]], bins=40)
        axis.set_xlabel("step time after warm-up (ms, slowest rank per step)")
        axis.set_ylabel("steps")
        axis.set_title("smoke training: step-time distribution")
        plots.append(_svg(figure))
    return plots


def _resume_plot(resume: dict[str, Any]) -> str | None:
    """The resumed steps' losses over the run that went on: one line where they are identical."""
    reference, resumed = resume.get("reference_mean_loss") or [], resume.get("resumed_mean_loss") or []
    if not reference or not resumed:
        return None
    figure, axis = plt.subplots(figsize=(7, 3))
    first = resume["saved_at"] + 1
    axis.plot(range(first, first + len(reference)), reference, label="went on", linewidth=3, alpha=0.5)
    axis.plot(range(first, first + len(resumed)), resumed, label="resumed from the checkpoint", linestyle="--")
    axis.set_xlabel("step")
    axis.set_ylabel("mean loss")
    axis.set_title(f"resumed after step {resume['saved_at']}")
    axis.legend(loc="upper right")
    return _svg(figure)


def _timeline_plot(rounds: list[dict[str, Any]]) -> str | None:
    """The rounds as bars over time: what ran when, the localisation rounds apart, and the
    rounds where a job failed marked."""
    timed = [r for r in rounds if r.get("start") and r.get("end")]
    if not timed:
        return None
    origin = datetime.fromisoformat(timed[0]["start"])
    figure, axis = plt.subplots(figsize=(9, 0.45 * len(timed) + 1.2))
    for row, round_ in enumerate(timed):
        begin = (datetime.fromisoformat(round_["start"]) - origin).total_seconds()
        width = max(0.5, (datetime.fromisoformat(round_["end"]) - origin).total_seconds() - begin)
        failed = sum(job["status"] != "ok" for job in round_["jobs"])
        colour = "#d9534f" if failed else ("#f0ad4e" if round_["kind"] == "localise" else "#5cb85c")
        axis.barh(row, width, left=begin, color=colour)
        label = f"{round_['name']} ({len(round_['jobs'])} job{'s' if len(round_['jobs']) > 1 else ''}"
        label += f", {failed} failed)" if failed else ")"
        axis.text(begin + width + 0.5, row, label, va="center", fontsize="small")
    axis.set_yticks(range(len(timed)), [str(n) for n in range(1, len(timed) + 1)])
    axis.invert_yaxis()
    axis.set_xlabel("seconds since the first round started")
    axis.set_ylabel("round")
    axis.set_title("rounds: green the schedule, orange localisation, red a job failed or hung")
    axis.grid(True, axis="x", alpha=0.3)
    axis.set_xlim(right=axis.get_xlim()[1] * 1.6)
    return _svg(figure)


def _rounds_section(document: dict[str, Any]) -> str:
    rounds = document.get("rounds") or []
    if not rounds:
        return ""
    rows = []
    for number, round_ in enumerate(rounds, 1):
        bad = [job for job in round_["jobs"] if job["status"] != "ok" or job.get("stragglers")]
        detail = "; ".join(f"{job['name']}: {job['status']}{' ' + job['reason'] if job.get('reason') else ''}"
                           + (f" (names {', '.join(job['named'] or job['stragglers'])})"
                              if job.get("named") or job.get("stragglers") else "") for job in bad[:20])
        more = f"; and {len(bad) - 20} more" if len(bad) > 20 else ""
        rows.append(f"<tr class='{'fail' if bad else 'pass'}'><td>{number}</td><td>{html.escape(round_['kind'])}</td>"
                    f"<td>{html.escape(round_['name'])}</td><td>{len(round_['jobs'])}</td>"
                    f"<td>{round_['duration_s']:.0f} s</td><td>{html.escape(detail + more)}</td></tr>")
    findings = "".join(f"<li><b>{html.escape(f['kind'])}</b> {html.escape(', '.join(f['nodes']))} "
                       f"({html.escape(f['instrument'])}): {html.escape(f['how'])}</li>"
                       for f in document.get("findings") or [])
    excluded = "".join(f"<li>{html.escape(node)}: left out from round \"{html.escape(name)}\" on</li>"
                       for node, name in (document.get("excluded") or {}).items())
    schedule = document.get("schedule") or {}
    return (f"<h2>Rounds</h2><p>{schedule.get('base_rounds', 0)} rounds of the schedule, "
            f"{schedule.get('localise_rounds', 0)} to localise; the jobs of a round ran at the same time.</p>"
            "<table><tr><th>#</th><th>kind</th><th>round</th><th>jobs</th><th>took</th><th>failed or lagging</th>"
            f"</tr>{''.join(rows)}</table>"
            + (f"<h2>How the culprits were found</h2><ul>{findings}</ul>" if findings else "")
            + (f"<p>Named nodes were left out of the rounds after:</p><ul>{excluded}</ul>" if excluded else ""))


def _storage_section(storage: dict[str, Any]) -> str:
    """The checkpoint each node wrote and read, and the save and load against their limits."""
    if not storage:
        return ""
    target = storage["checkpoint"]
    rows = "".join(f"<tr><td>{html.escape(node)}</td><td>{figures['write_gbps']:.3g}</td>"
                   f"<td>{figures['read_gbps']:.3g}</td><td>{figures['write_s']:.3g}</td><td>{figures['read_s']:.3g}</td>"
                   f"<td>{figures['bytes'] / 1e6:.4g}</td></tr>" for node, figures in sorted(storage["nodes"].items()))
    totals = ""
    if "save_s" in storage:
        totals = (f"<p>Save of the whole checkpoint, every node at once: {storage['save_s']:.3g} s (limit "
                  f"{storage['save_max_s']:g} s); load {storage['load_s']:.3g} s (limit {storage['load_max_s']:g} s); "
                  f"a save every {storage['interval_s'] / 60:g} min costs {storage['overhead_at_interval']:.2%} of the "
                  "training's time.</p>")
    return (f"<h2>Checkpoint storage</h2><p>Target: {html.escape(str(target['model']))}, "
            f"{target['total_bytes'] / 1e9:.4g} GB in {target['ranks']} shards of {target['shard_bytes'] / 1e6:.4g} MB "
            f"(one per rank of the fleet).</p>{totals}<table><tr><th>node</th><th>write GB/s</th><th>read GB/s</th>"
            f"<th>write s</th><th>read s</th><th>MB</th></tr>{rows}</table>")


def write_html(path: Path, document: dict[str, Any]) -> Path:
    verdict = "CERTIFIED" if document["certified"] else "NOT CERTIFIED"
    rows = "".join(
        f"<tr class='{'pass' if c['passed'] else 'fail'}'><td>{'pass' if c['passed'] else 'FAIL'}</td>"
        f"<td>{html.escape(c['name'])}</td><td>{html.escape(', '.join(c['blamed']))}</td>"
        f"<td>{html.escape(str(c['measured']))} {html.escape(c['unit'])}</td>"
        f"<td>{html.escape(str(c['threshold']))}</td><td>{html.escape(c['detail'])}</td></tr>"
        for c in document["checks"])
    nodes = "".join(f"<tr class='{'pass' if v['certified'] else 'fail'}'><td>{html.escape(n)}</td>"
                    f"<td>{'certified' if v['certified'] else 'FAILED'}</td>"
                    f"<td>{html.escape(', '.join(v['failed_checks']))}</td></tr>"
                    for n, v in document["node_verdicts"].items())
    bandwidth = [_bandwidth_plot(document["curves"], instrument) for instrument in ("nccl-tests", "sweep")]
    timeline = _timeline_plot(document.get("rounds") or [])
    resumed = _resume_plot(document.get("resume") or {})
    plots = ([timeline] if timeline else []) + [p for p in bandwidth if p] + _training_plots(
        document.get("training", {})) + ([resumed] if resumed else [])
    training = document.get("training", {})
    speed = ""
    if training:
        mfu = (f", MFU {training['mfu']:.1%} of {html.escape(str(training.get('device_name')))}'s "
               f"{training['peak_tflops']:g} TFLOP/s dense bf16 peak" if training.get("mfu") else "")
        speed = (f"<p>Smoke training: {training['ranks']} ranks, preset {html.escape(training['preset'])}, "
                 f"{training['steps_done']}/{training['steps_requested']} steps, "
                 f"{training['tokens_per_second']:.0f} tokens/s after the warm-up steps{mfu}.</p>")
    versions = document.get("nccl_versions") or {}
    nccl = "".join(
        f"<p>NCCL ({label}): " + html.escape(", ".join(f"{version} on {', '.join(sorted(nodes))}"
                                                      for version, nodes in _by_value(versions[key]).items())) + "</p>"
        for key, label in (("system", "the nodes' libnccl2, run by nccl-tests"), ("torch", "PyTorch's own"))
        if versions.get(key))
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Certification of {html.escape(document['cluster'])}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;font-size:90%}} .fail{{background:#fdd}} .pass{{background:#efe}}</style>
</head><body>
<h1>{html.escape(document['cluster'])}: {verdict}</h1>
<p>{html.escape(document['started'])}, {document['duration_s']:.0f} s; thresholds: {html.escape(
        document['thresholds']['source'])} (intra-node {document['thresholds']['intra_node_gbps']} GB/s, inter-node
 {document['thresholds']['inter_node_gbps']} GB/s).</p>
<h2>Nodes</h2><table><tr><th>node</th><th>verdict</th><th>failed checks</th></tr>{nodes}</table>
{speed}{nccl}{_storage_section(document.get("storage") or {})}{_rounds_section(document)}
<h2>Checks</h2><table><tr><th></th><th>check</th><th>blamed</th><th>measured</th><th>threshold</th><th>detail</th></tr>
{rows}</table>
<h2>Plots</h2>{''.join(f'<div>{p}</div>' for p in plots)}
</body></html>
"""
    return write_private(path, page)
