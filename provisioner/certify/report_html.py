"""certification.html: one self-contained page (no network needed) that reads top down, summary
first: the verdict, the failing nodes with their evidence and the commands that take them out;
then a node-by-check map, charts that scale to 1,000 nodes (a mark per node, the outliers named),
the training, the storage, the rounds, and the checks (failures shown, passes folded)."""

from __future__ import annotations

import html
import io
import re
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

from provisioner.ansible.records import write_private
from provisioner.certify import charts
from provisioner.certify.schedule import pair_reference
from provisioner.certify.summary import figure, summarise

matplotlib.use("Agg")
import matplotlib.pyplot as plt

FOLD_ABOVE = 32  # nodes: above this, the certified rows of the map start folded
STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222}
h1{margin:0}.banner{padding:.8em 1em;border-radius:6px;margin-bottom:1em}.certified{background:#dff0d8}
.failed{background:#f2dede}.interrupted{background:#fcf8e3}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:3px 7px;font-size:88%;text-align:left;vertical-align:top}
th{background:#f5f5f5;cursor:pointer}td.n{text-align:right;white-space:nowrap}tr.fail td:first-child{color:#a94442;
font-weight:bold}pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:85%}.map td{padding:0;width:14px;
height:14px;border:1px solid #fff}.map td.node{width:auto;padding:0 6px;font-size:80%}.map th{font-size:70%;
writing-mode:vertical-rl;transform:rotate(180deg);padding:4px 1px;max-height:180px}.s-fail{background:#d9534f}
.s-warn{background:#f0ad4e}.s-pass{background:#8fc98f}.s-none{background:#eee}.hidden{display:none}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.node-failure{border-left:4px solid #d9534f;padding-left:.8em;margin:.8em 0}figure{margin:1em 0}"""
SCRIPT = """(function () {
  var filter = document.getElementById('node-filter'), showAll = document.getElementById('show-all');
  var order = {fail: 0, warn: 1, pass: 2, none: 3};
  function apply() {
    var text = (filter.value || '').trim().toLowerCase();
    document.querySelectorAll('[data-nodes]').forEach(function (row) {
      var match = !text || row.getAttribute('data-nodes').toLowerCase().indexOf(text) >= 0;
      var folded = row.classList.contains('ok') && !showAll.checked && !text;
      row.classList.toggle('hidden', !match || folded);
    });
  }
  function key(cell) {
    var status = /s-(\\w+)/.exec(cell.className);
    return status ? order[status[1]] : (cell.getAttribute('data-key') || cell.textContent);
  }
  filter.addEventListener('input', apply);
  showAll.addEventListener('change', apply);
  apply();
  document.querySelectorAll('table.sortable th').forEach(function (th, column) {
    th.addEventListener('click', function () {
      var body = th.closest('table').tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var ascending = th.getAttribute('data-asc') !== '1';
      rows.sort(function (a, b) {
        var x = key(a.cells[column]), y = key(b.cells[column]);
        return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
      });
      th.setAttribute('data-asc', ascending ? '1' : '0');
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
})();"""


def _e(text: Any) -> str:
    return html.escape(str(text))


def _svg(chart: plt.Figure) -> str:
    buffer = io.StringIO()
    chart.savefig(buffer, format="svg", bbox_inches="tight",
                  metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    plt.close(chart)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


# ---- summary -------------------------------------------------------------------------------
def _banner(document: dict[str, Any], summary: dict[str, Any]) -> str:
    style = {"CERTIFIED": "certified", "NOT CERTIFIED": "failed"}.get(summary["verdict"], "interrupted")
    thresholds = document["thresholds"]
    return (f"<div class='banner {style}'><h1>{_e(document['cluster'])}: {_e(summary['verdict'])}</h1>"
            f"<p><b>{summary['certified_nodes']} of {summary['nodes']} nodes certified</b>, "
            f"{summary['nodes'] - summary['certified_nodes']} failed; {summary['failed_checks']} of "
            f"{summary['checks']} checks failed. {summary['rounds']} rounds ({summary['base_rounds']} of the "
            f"schedule, {summary['localise_rounds']} to localise) in {summary['duration_s'] / 60:.1f} min, "
            f"started {_e(document['started'])}. Thresholds: {_e(thresholds['source'])} (inside a node "
            f"{thresholds['intra_node_gbps']:g} GB/s, across nodes {thresholds['inter_node_gbps']:g} GB/s).</p></div>")


def _failures(summary: dict[str, Any]) -> str:
    if not (summary["failed_nodes"] or summary["unblamed_failures"] or summary["ranks"]):
        return "<h2>Failures</h2><p>None: every node passed every check.</p>"
    parts = ["<h2>Failures</h2>"]
    for failure in summary["failed_nodes"]:
        items = "".join(f"<li><b>{_e(c['name'])}</b>: {_e(c['evidence'])}</li>" for c in failure["checks"])
        parts.append(f"<div class='node-failure' data-nodes='{_e(failure['node'])}'><h3>{_e(failure['node'])}</h3>"
                     f"<ul>{items}</ul><p>To take it out of service, and back once repaired or replaced:"
                     f"</p><pre>{_e(chr(10).join(failure['actions']))}</pre></div>")
    if summary["unblamed_failures"]:
        parts.append("<h3>Failed with no node blamed</h3><ul>" + "".join(
            f"<li><b>{_e(c['name'])}</b>: {_e(c['evidence'])}</li>" for c in summary["unblamed_failures"]) + "</ul>")
    if summary["ranks"]:
        parts.append("<h3>Hung or straggling ranks</h3><ul>" + "".join(
            f"<li>{_e(line)}</li>" for line in summary["ranks"]) + "</ul>")
    return "".join(parts)


# ---- the node by check map -------------------------------------------------------------------
SCOPE_WORDS = {"node": "alone", "pair": "pairs", "locate": "with known-good partners", "all": "all nodes",
               "half": "halves"}


def _kind(check: dict[str, Any]) -> tuple[str, str]:
    """A check's column: its id and its name with the node names taken out, the scope named."""
    key, label = check["id"], check["name"]
    for node in sorted(check["nodes"], key=len, reverse=True):
        key = key.replace(node, "*")
        label = label.replace(node, "")
    label = re.sub(r"\s*\(\s*\+?\s*\)", "", label)
    label = re.sub(r"\bof\s+\+?\s+within", "within", label).replace(" (all nodes)", "")
    segments = key.split(".")
    if segments[0] in ("nccl-tests", "sweep") and len(segments) > 2:
        scope = segments[2] if segments[1] == "variance" else segments[1]
        if scope in SCOPE_WORDS:
            label = f"{label} ({SCOPE_WORDS[scope]})"
    return key, " ".join(label.split())


def _status(checks: list[dict[str, Any]], node: str) -> str:
    if not checks:
        return "none"
    if any(not c["passed"] and node in c["blamed"] for c in checks):
        return "fail"
    return "warn" if any(not c["passed"] for c in checks) else "pass"


def _heatmap(document: dict[str, Any]) -> str:
    columns: dict[str, str] = {}
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for check in document["checks"]:
        key, label = _kind(check)
        columns.setdefault(key, label)
        for node in check["nodes"]:
            cells.setdefault((node, key), []).append(check)
    verdicts = document["node_verdicts"]
    header = "".join(f"<th title='{_e(label)}'>{_e(label[:48])}</th>" for label in columns.values())
    rows = []
    for node in document["nodes"]:
        statuses = [_status(cells.get((node, key), []), node) for key in columns]
        failed = sum(status == "fail" for status in statuses)
        ok = verdicts.get(node, {}).get("certified", False)
        row = "".join(f"<td class=s-{status}></td>" for status in statuses)
        rows.append(f"<tr class='{'ok' if ok else 'bad'}' data-nodes='{_e(node)}'><td class='node' "
                    f"data-key='{0 if not ok else 1}{node}'>{_e(node)}</td><td class='n' data-key='{999 - failed:03d}'>"
                    f"{failed}</td>{row}</tr>")
    certified = sum(v["certified"] for v in verdicts.values())
    fold = len(document["nodes"]) > FOLD_ABOVE and certified < len(document["nodes"])
    toggle = (f"The {certified} certified nodes are folded: <label><input type='checkbox' id='show-all'> show them"
              "</label>." if fold else "<input type='checkbox' id='show-all' checked hidden>")
    return ("<h2>Nodes by check</h2><p class='legend'>Each row a node, each column a check;"
            "<span class='s-fail'></span>failed, the node blamed<span class='s-warn'></span>failed, another node "
            "blamed<span class='s-pass'></span>passed<span class='s-none'></span>not run. Click a heading to sort. "
            f"{toggle}</p><table class='map sortable'><thead><tr><th>node</th><th>failed</th>"
            f"{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


# ---- charts ------------------------------------------------------------------------------------
def _communication_charts(document: dict[str, Any]) -> list[str]:
    medians = document.get("medians_gbps") or {}
    variance = (document.get("criteria") or {}).get("variance_percent", 5.0)
    thresholds = document["thresholds"]
    charts_html = []
    for instrument in ("nccl-tests", "sweep"):
        per_node = medians.get(f"{instrument}.node") or {}
        charts_html.append(charts.against_reference(f"{instrument}: busbw of each node alone at the gradient size",
                                                    per_node, "GB/s", variance,
                                                    threshold=thresholds["intra_node_gbps"]))
        pairs = medians.get(f"{instrument}.pair") or {}
        if pairs:
            reference = pair_reference([(key.split("+"), value) for key, value in pairs.items()])
            floor = reference * (1 - variance / 100)
            rounds = []
            for round_ in document.get("rounds") or []:
                for job in round_["jobs"]:
                    key = "+".join(job["nodes"])
                    if job["instrument"] == instrument and job["scope"] in ("pair", "locate") and key in pairs:
                        rounds.append({"round": round_["name"], "nodes": job["nodes"], "busbw": pairs[key]})
            charts_html.append(charts.pair_matrix(f"{instrument}: each node's pair, round by round (reference "
                                                  f"{reference:.3g} GB/s, floor {floor:.3g})", rounds, floor, "GB/s"))
            charts_html.append(charts.against_reference(f"{instrument}: busbw of each pair", pairs, "GB/s", variance,
                                                        reference=reference, reference_label="a sound pair",
                                                        threshold=thresholds["inter_node_gbps"]))
    size_plot = _size_plot(document.get("curves") or [])
    return [c for c in charts_html if c] + ([size_plot] if size_plot else [])


def _size_plot(curves: list[dict[str, Any]]) -> str | None:
    """busbw by message size: per scope the median over its jobs and the band from the slowest to the
    fastest, so that a thousand nodes make one line and one band, not a thousand lines."""
    if not curves:
        return None
    chart, axis = plt.subplots(figsize=(8, 4))
    for (instrument, scope), colour in zip(sorted({(c["instrument"], c["scope"]) for c in curves}),
                                           ["#31708f", "#3c763d", "#8a6d3b", "#a94442", "#6f42c1", "#555"],
                                           strict=False):
        mine = [c for c in curves if c["instrument"] == instrument and c["scope"] == scope]
        sizes = sorted({size for c in mine for size in c["sizes_bytes"]})
        at = [[c["busbw_gbps"][c["sizes_bytes"].index(size)] for c in mine if size in c["sizes_bytes"]]
              for size in sizes]
        label = f"{instrument}, {scope}" + (f" ({len(mine)} jobs: median and range)" if len(mine) > 1 else "")
        axis.plot(sizes, [statistics.median(v) for v in at], color=colour, label=label, marker=".")
        if len(mine) > 1:
            axis.fill_between(sizes, [min(v) for v in at], [max(v) for v in at], color=colour, alpha=0.15)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("message size (bytes)")
    axis.set_ylabel("busbw (GB/s)")
    axis.set_title("all_reduce busbw by message size")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    return _svg(chart)


def _training_section(document: dict[str, Any]) -> str:
    training = document.get("training") or {}
    if not training:
        return ""
    parts = [f"<h2>Smoke training</h2><p>{training['ranks']} ranks on {len(training['nodes'])} nodes, preset "
             f"{_e(training['preset'])}, {training['steps_done']} of {training['steps_requested']} steps, "
             f"{training['tokens_per_second']:.0f} tokens/s after the warm-up"
             + (f", MFU {training['mfu']:.1%} of {_e(training.get('device_name'))}'s {training['peak_tflops']:g} "
                "TFLOP/s dense bf16 peak" if training.get("mfu") else "") + ".</p>"]
    if training.get("mean_loss"):
        chart, axis = plt.subplots(figsize=(8, 3))
        axis.plot(range(len(training["mean_loss"])), training["mean_loss"])
        axis.set(xlabel="step", ylabel="loss (mean over ranks)", title="loss")
        axis.grid(True, alpha=0.3)
        parts.append(f"<figure>{_svg(chart)}</figure>")
    checks = {c["id"]: c for c in document["checks"]}
    identity = checks.get("training.grad_norm_consistency")
    if training.get("grad_norm"):
        chart, axis = plt.subplots(figsize=(8, 3))
        axis.plot(range(len(training["grad_norm"])), training["grad_norm"])
        spread = "" if identity is None else (f": identical on every rank (largest spread {identity['measured']:g})"
                                              if identity["passed"] else f": differs ({identity['detail']})")
        axis.set(xlabel="step", ylabel="global gradient norm", title=f"gradient norm{spread}")
        axis.grid(True, alpha=0.3)
        parts.append(f"<figure>{_svg(chart)}</figure>")
    compute = {f"rank {r['rank']} ({r['host']})": r["compute_median_s"] * 1000
               for r in training.get("rank_compute") or [] if r.get("compute_median_s")}
    if compute:
        limit = (document.get("criteria") or {}).get("straggler_percent", 100.0)
        chart_html = charts.against_reference("median compute time per step of each rank (a straggler is slow)",
                                              compute, "ms", limit, reference_label="median", above=True)
        parts.append(f"<figure>{chart_html}</figure>")
    if training.get("step_time_s"):
        chart, axis = plt.subplots(figsize=(8, 3))
        axis.hist([t * 1000 for t in training["step_time_s"]], bins=40)
        axis.set(xlabel="step time after the warm-up (ms, slowest rank of each step)", ylabel="steps",
                 title="step times")
        parts.append(f"<figure>{_svg(chart)}</figure>")
    resumed = _resume_plot(document.get("resume") or {})
    if resumed:
        parts.append(f"<figure>{resumed}</figure>")
    return "".join(parts)


def _resume_plot(resume: dict[str, Any]) -> str | None:
    """The resumed steps' losses over the run that went on: one line where they are identical."""
    reference, resumed = resume.get("reference_mean_loss") or [], resume.get("resumed_mean_loss") or []
    if not reference or not resumed:
        return None
    chart, axis = plt.subplots(figsize=(7, 3))
    first = resume["saved_at"] + 1
    axis.plot(range(first, first + len(reference)), reference, label="went on", linewidth=3, alpha=0.5)
    axis.plot(range(first, first + len(resumed)), resumed, label="resumed from the checkpoint", linestyle="--")
    axis.set(xlabel="step", ylabel="mean loss", title=f"resumed after step {resume['saved_at']}")
    axis.legend(loc="upper right")
    return _svg(chart)


def _storage_section(document: dict[str, Any]) -> str:
    """The checkpoint each node wrote and read, against the fleet median; the save and load totals."""
    storage = document.get("storage") or {}
    if not storage:
        return ""
    target = storage["checkpoint"]
    variance = (document.get("criteria") or {}).get("variance_percent", 5.0)
    parts = [f"<h2>Checkpoint storage</h2><p>Target: {_e(target['model'])}, {target['total_bytes'] / 1e9:.4g} GB in "
             f"{target['ranks']} shards of {target['shard_bytes'] / 1e6:.4g} MB (one per rank of the fleet).</p>"]
    if "save_s" in storage:
        parts.append(f"<p>Save of the whole checkpoint, every node at once: {storage['save_s']:.3g} s (limit "
                     f"{storage['save_max_s']:g} s); load {storage['load_s']:.3g} s (limit {storage['load_max_s']:g} "
                     f"s); a save every {storage['interval_s'] / 60:g} min costs {storage['overhead_at_interval']:.2%}"
                     " of the training's time.</p>")
    for direction in ("write", "read"):
        values = {node: figures[f"{direction}_gbps"] for node, figures in storage["nodes"].items()}
        chart_html = charts.against_reference(f"checkpoint {direction} of each node", values, "GB/s", variance)
        if chart_html:
            parts.append(f"<figure>{chart_html}</figure>")
    return "".join(parts)


def _timeline_plot(rounds: list[dict[str, Any]]) -> str | None:
    """The rounds as bars over time: the localisation rounds apart, rounds where a job failed marked."""
    timed = [r for r in rounds if r.get("start") and r.get("end")]
    if not timed:
        return None
    origin = datetime.fromisoformat(timed[0]["start"])
    chart, axis = plt.subplots(figsize=(9, 0.4 * len(timed) + 1.2))
    for row, round_ in enumerate(timed):
        begin = (datetime.fromisoformat(round_["start"]) - origin).total_seconds()
        width = max(0.5, (datetime.fromisoformat(round_["end"]) - origin).total_seconds() - begin)
        failed = sum(job["status"] != "ok" for job in round_["jobs"])
        colour = "#d9534f" if failed else ("#f0ad4e" if round_["kind"] == "localise" else "#5cb85c")
        axis.barh(row, width, left=begin, color=colour)
        label = f"{round_['name']} ({len(round_['jobs'])} job{'s' if len(round_['jobs']) > 1 else ''}"
        axis.text(begin + width + 0.5, row, label + (f", {failed} failed)" if failed else ")"), va="center",
                  fontsize="small")
    axis.set_yticks(range(len(timed)), [str(n) for n in range(1, len(timed) + 1)])
    axis.invert_yaxis()
    axis.set(xlabel="seconds since the first round started", ylabel="round",
             title="rounds: green the schedule, orange localisation, red a job failed or hung")
    axis.grid(True, axis="x", alpha=0.3)
    axis.set_xlim(right=axis.get_xlim()[1] * 1.6)
    return _svg(chart)


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
        rows.append(f"<tr class='{'fail' if bad else 'pass'}'><td class='n'>{number}</td><td>{_e(round_['kind'])}</td>"
                    f"<td>{_e(round_['name'])}</td><td class='n'>{len(round_['jobs'])}</td>"
                    f"<td class='n'>{round_['duration_s']:.0f} s</td><td>{_e(detail + more)}</td></tr>")
    findings = "".join(f"<li><b>{_e(f['kind'])}</b> {_e(', '.join(f['nodes']))} ({_e(f['instrument'])}): "
                       f"{_e(f['how'])}</li>" for f in document.get("findings") or [])
    excluded = "".join(f"<li>{_e(node)}: left out from round \"{_e(name)}\" on</li>"
                       for node, name in (document.get("excluded") or {}).items())
    timeline = _timeline_plot(rounds)
    return ("<h2>Rounds</h2><p>The jobs of a round ran at the same time.</p>"
            + (f"<figure>{timeline}</figure>" if timeline else "")
            + "<table><thead><tr><th>#</th><th>kind</th><th>round</th><th>jobs</th><th>took</th>"
              f"<th>failed or lagging</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            + (f"<h3>How the culprits were found</h3><ul>{findings}</ul>" if findings else "")
            + (f"<p>Named nodes were left out of the rounds after:</p><ul>{excluded}</ul>" if excluded else ""))


# ---- checks ------------------------------------------------------------------------------------
def _passing_summary(checks: list[dict[str, Any]]) -> str:
    """The passing checks of a large fleet by kind: how many, and the spread of what they measured
    (every one of them is in certification.json)."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for check in checks:
        kinds.setdefault(_kind(check)[1], []).append(check)
    rows = []
    for label, members in kinds.items():
        values = [c["measured"] for c in members if isinstance(c["measured"], int | float)]
        unit = members[0]["unit"]
        spread = (f"{figure(min(values), unit)} to {figure(max(values), unit)}, median "
                  f"{figure(statistics.median(values), unit)}") if values else ""
        rows.append(f"<tr><td>{_e(label)}</td><td class='n'>{len(members)}</td><td>{_e(spread)}</td></tr>")
    return (f"<details><summary>the {len(checks)} passing checks, by kind (each in certification.json)</summary>"
            "<table class='sortable'><thead><tr><th>check</th><th>passed</th><th>measured</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></details>")


def _check_rows(checks: list[dict[str, Any]], folded: bool) -> str:
    rows = []
    for check in checks:
        nodes = " ".join(check["nodes"])
        rows.append(f"<tr class='{'pass' if check['passed'] else 'fail'}' data-nodes='{_e(nodes)}'>"
                    f"<td>{'pass' if check['passed'] else 'FAIL'}</td><td>{_e(check['name'])}</td>"
                    f"<td>{_e(', '.join(check['blamed']))}</td>"
                    f"<td class='n'>{_e(figure(check['measured'], check['unit']))}</td>"
                    f"<td class='n'>{_e(figure(check['threshold'], check['unit']))}</td>"
                    f"<td>{_e(check['detail'])}</td></tr>")
    head = ("<table class='sortable'><thead><tr><th></th><th>check</th><th>blamed</th><th>measured</th>"
            "<th>threshold</th><th>detail</th></tr></thead><tbody>")
    table = head + "".join(rows) + "</tbody></table>"
    return f"<details><summary>the {len(checks)} passing checks</summary>{table}</details>" if folded else table


def _versions(document: dict[str, Any]) -> str:
    versions = document.get("nccl_versions") or {}
    parts = []
    for key, label in (("system", "the nodes' libnccl2, run by nccl-tests"), ("torch", "PyTorch's own")):
        grouped: dict[str, list[str]] = {}
        for node, version in (versions.get(key) or {}).items():
            grouped.setdefault(version, []).append(node)
        if grouped:
            parts.append(f"<p>NCCL ({label}): " + _e(", ".join(
                f"{version} on {len(nodes)} node{'s' if len(nodes) > 1 else ''}" + (
                    f" ({', '.join(sorted(nodes))})" if len(grouped) > 1 else "")
                for version, nodes in grouped.items())) + "</p>")
    return "".join(parts)


def _passes(document: dict[str, Any], passing: list[dict[str, Any]]) -> str:
    if not passing:
        return ""
    return _passing_summary(passing) if len(document["nodes"]) > FOLD_ABOVE else _check_rows(passing, True)


def render(document: dict[str, Any]) -> str:
    summary = summarise(document)
    failing = [c for c in document["checks"] if not c["passed"]]
    passing = [c for c in document["checks"] if c["passed"]]
    communication = "".join(f"<figure>{chart}</figure>" for chart in _communication_charts(document))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>Certification of {_e(document['cluster'])}: {_e(summary['verdict'])}</title><style>{STYLE}</style></head><body>
{_banner(document, summary)}
<p><label>Filter by node: <input id="node-filter" type="search" placeholder="gpu017"></label></p>
{_failures(summary)}
{_heatmap(document)}
{"<h2>Communication</h2>" + communication if communication else ""}
{_training_section(document)}
{_storage_section(document)}
{_rounds_section(document)}
<h2>Checks</h2><p>{len(failing)} failed of {len(document['checks'])}.</p>
{_check_rows(failing, False) if failing else ""}{_passes(document, passing)}
{_versions(document)}
<script>{SCRIPT}</script>
</body></html>
"""


def write_html(path: Path, document: dict[str, Any]) -> Path:
    return write_private(path, render(document))
