"""Certification criteria, the driver's Slurm command lines, Slurm helpers and reports, on
synthetic and real outputs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from provisioner.certify import criteria, jobs, outputs, report, report_html
from provisioner.certify.driver import srun_argv
from provisioner.certify.profiles import ProfileError, thresholds
from provisioner.certify.schedule import Job
from provisioner.parsers import slurm
from provisioner.parsers.common import ParseError
from tests.conftest import REAL_OUTPUTS

LAB = thresholds("lab-cpu", "any", 0, 400, None)
H100 = thresholds(None, "H100-SXM5-80GB", 8, 400, None)
GRADIENT = 1 << 20


def judge(**changes) -> criteria.Criteria:
    return criteria.Criteria(**{"thresholds": LAB, "gradient_bytes": GRADIENT, "expect_gdr": True, **changes})


def sweep_result(scope: str, nodes: list[str], busbw: float, wrong: int = 0) -> dict:
    rows = [{"size_bytes": size, "count": size // 4, "time_us": 1.0, "algbw_gbps": busbw, "busbw_gbps": busbw,
             "wrong": wrong} for size in (GRADIENT // 2, GRADIENT)]
    report_line = {"collective": "all_reduce", "ranks": 2, "hosts": nodes, "rows": rows}
    return {"name": f"sweep {scope}", "instrument": "sweep", "scope": scope, "nodes": nodes, "rc": 0,
            "stdout": "noise\nPROVISION-SWEEP " + json.dumps(report_line) + "\n", "stderr": ""}


def by_id(checks) -> dict[str, criteria.Check]:
    return {check.id: check for check in checks}


def test_shipped_profiles_and_overrides():
    assert H100.intra_node_gbps == 430.0 and H100.inter_node_gbps == 345.0
    overridden = thresholds(None, "H100-SXM5-80GB", 8, 400, {"inter_node": 300.0})
    assert overridden.inter_node_gbps == 300.0 and "overrides" in overridden.source
    with pytest.raises(ProfileError, match="gpu_model 'X1'"):
        thresholds(None, "X1", 8, 400, None)
    with pytest.raises(ProfileError, match="unknown profile"):
        thresholds("nope", "H100-SXM5-80GB", 8, 400, None)


def test_srun_command_lines():
    settings = {"procs_per_node": 8, "gpus_per_node": 8, "mpi": "pmix", "partition": "gpu", "reservation": "cert",
                "time_limit": "0:30:00"}
    cpus = slurm.node_cpus("a|64\nb|64\na|64\n")
    assert cpus == {"a": 64, "b": 64}
    nccl = srun_argv(Job("nccl-tests", "pair", ["a", "b"]), settings, "provision-certify-x-1", cpus)
    assert "--ntasks-per-node=8" in nccl and "--mpi=pmix" in nccl and "--nodelist=a,b" in nccl
    # every GPU, all the memory and every CPU of each node: with ConstrainDevices=yes a step
    # without --gpus-per-node sees no GPU at all; --exclusive alone gives a task one CPU
    assert "--gpus-per-node=8" in nccl and "--mem=0" in nccl and "--exclusive" in nccl
    assert "--cpus-per-task=8" in nccl and "--job-name=provision-certify-x-1" in nccl
    assert "--reservation=cert" in nccl and nccl[-2:] == ["/usr/local/sbin/provision-certify-launch", "nccl-tests"]
    train = srun_argv(Job("train", "training", ["a"], args=["--steps", "5"]), settings, "n", cpus)
    assert "--ntasks-per-node=1" in train and not any(a.startswith("--mpi") for a in train)
    assert "--cpus-per-task=64" in train  # torchrun starts every rank from the node's one task
    assert train[-3:] == ["train", "--steps", "5"] and "--gpus-per-node=8" in train
    cpu_only = srun_argv(Job("sweep", "node", ["a"]), {**settings, "gpus_per_node": 0}, "n", {})
    assert not any(a.startswith("--gpus") for a in cpu_only) and "--cpus-per-task=1" in cpu_only


def test_busy_nodes_need_idle_or_their_reservation():
    sinfo = "gpu01|idle\ngpu02|drained\ngpu03|allocated\ngpu04|reserved\ngpu05|idle*\n"
    assert jobs.busy_nodes(sinfo, ["gpu01"], "", "") == []
    problems = jobs.busy_nodes(sinfo, ["gpu02", "gpu03", "gpu05", "gpu09"], "", "")
    assert problems == ["gpu02: drained (needs idle)", "gpu03: allocated (needs idle)",
                        "gpu05: idle* (needs idle)", "gpu09: not known to Slurm"]
    reservation = "ReservationName=cert StartTime=now Nodes=gpu[01,04-05] NodeCnt=3"
    assert jobs.busy_nodes(sinfo, ["gpu01", "gpu04"], "cert", reservation) == []
    assert jobs.busy_nodes(sinfo, ["gpu03"], "cert", reservation) == ["gpu03: not in reservation cert"]
    assert jobs.busy_nodes(sinfo, ["gpu01"], "cert", "Reservation cert not found") == ["reservation cert not found"]


def test_communication_thresholds_data_and_variance():
    results = [sweep_result("node", ["a"], 1.0), sweep_result("node", ["b"], 0.97),
               sweep_result("node", ["c"], 0.5), sweep_result("all", ["a", "b", "c"], 0.01, wrong=3)]
    checks, medians = criteria.communication_checks(results, judge(), localised={"c"})
    found = by_id(checks)
    assert medians["sweep.node"] == {"a": 1.0, "b": 0.97, "c": 0.5}
    assert not found["sweep.all.all.busbw"].passed and found["sweep.all.all.busbw"].threshold == 0.02
    assert not found["sweep.all.all.data"].passed and found["sweep.all.all.data"].measured == 6
    assert found["sweep.variance.node.a"].passed and found["sweep.variance.node.b"].passed
    slow = found["sweep.variance.node.c"]
    assert not slow.passed and slow.blamed == ["c"] and "below it" in slow.detail
    verdicts = criteria.node_verdicts(checks, ["a", "b", "c"])
    # the all-nodes run's failures blame the node the localisation named, not the others
    assert verdicts["a"] == {"certified": True, "failed_checks": []}
    assert verdicts["c"]["failed_checks"] == ["sweep.all.all.busbw", "sweep.all.all.busbw_bucket",
                                              "sweep.all.all.data", "sweep.variance.node.c"]
    # without a localisation (a run whose rounds were cut short) every node of the job is suspect
    unlocalised = criteria.node_verdicts(criteria.communication_checks(results, judge())[0], ["a", "b", "c"])
    assert not unlocalised["a"]["certified"]


def test_a_node_measured_again_is_judged_by_its_last_measurement():
    """The schedule measures a node slow alone once more before naming it: the criteria take the
    last round's figure for it, and say what the first was."""
    results = [{**sweep_result("node", [node], value), "round": 0}
               for node, value in (("a", 1.0), ("b", 0.97), ("c", 0.3), ("d", 0.4))]
    results += [{**sweep_result("node", ["c"], 0.95), "round": 1}, {**sweep_result("node", ["d"], 0.45), "round": 1}]
    checks, medians = criteria.communication_checks(results, judge())
    found = by_id(checks)
    assert medians["sweep.node"] == {"a": 1.0, "b": 0.97, "c": 0.95, "d": 0.45}
    assert found["sweep.variance.node.c"].passed and not found["sweep.variance.node.d"].passed
    assert "measured again, the first time 0.300" in found["sweep.node.c.busbw"].detail
    assert "measured again" not in found["sweep.node.a.busbw"].detail


def test_busbw_is_also_judged_at_the_ddp_bucket_size():
    sizes = {32 << 20: 50.0, 64 << 20: 120.0, 128 << 20: 300.0, 8 << 30: 440.0}

    def result(node: str, at_bucket: float) -> dict:
        rows = [{"size_bytes": size, "count": size // 4, "time_us": 1.0, "algbw_gbps": bw, "wrong": 0,
                 "busbw_gbps": at_bucket if size == 128 << 20 else bw} for size, bw in sizes.items()]
        line = {"collective": "all_reduce", "ranks": 8, "hosts": [node], "rows": rows}
        return {"name": f"sweep node {node}", "instrument": "sweep", "scope": "node", "nodes": [node], "rc": 0,
                "stdout": "PROVISION-SWEEP " + json.dumps(line) + "\n", "stderr": ""}

    checks = by_id(criteria.communication_checks([result("a", 300.0), result("b", 200.0)],
                                                 judge(thresholds=H100, gradient_bytes=8 << 30))[0])
    # 100 MiB bucket: judged at the smallest measured size above it (128 MiB), floor 60 % of 430.
    bucket = checks["sweep.node.a.busbw_bucket"]
    assert bucket.passed and bucket.measured == 300.0 and bucket.threshold == 258.0
    assert "134217728 B messages" in bucket.detail
    slow = checks["sweep.node.b.busbw_bucket"]
    assert not slow.passed and slow.blamed == ["b"]
    assert checks["sweep.node.b.busbw"].passed  # fine at 8 GiB, slow at the size training sends


def test_a_slow_pair_blames_only_the_node_the_localisation_named():
    nodes = ["a", "b", "c", "d"]
    results = [sweep_result("pair", list(pair), 0.4 if "d" in pair else 1.0)
               for pair in [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]]
    checks, _ = criteria.communication_checks(results, judge(), localised={"d"})
    failing = [c for c in checks if not c.passed]
    assert {c.id for c in failing} == {"sweep.variance.pair.a+d", "sweep.variance.pair.b+d",
                                       "sweep.variance.pair.c+d"}
    assert all(c.blamed == [] for c in failing)  # a slow pair alone blames neither node
    checks += criteria.finding_checks([{"kind": "node", "nodes": ["d"], "instrument": "sweep", "scope": "rounds",
                                        "how": "bad with every partner"}], {"d"})
    verdicts = criteria.node_verdicts(checks, nodes)
    assert [n for n, v in verdicts.items() if not v["certified"]] == ["d"]
    assert verdicts["d"]["failed_checks"] == ["sweep.localised.node.d"]
    # a pair below its floor blames the localised node only
    floor = criteria.communication_checks([sweep_result("pair", ["a", "d"], 0.01)], judge(), localised={"d"})[0]
    assert by_id(floor)["sweep.pair.a+d.busbw"].blamed == ["d"]


def test_a_hung_run_fails_its_job_naming_the_hung_nodes():
    hung = dict(sweep_result("all", ["a", "b", "c"], 1.0), rc=1, hung=True, hung_named=["c"],
                hung_detail="no progress for 300 s: c: ranks 4,5 fell silent 40 s before the others")
    found = by_id(criteria.communication_checks([hung], judge(), localised={"c"})[0])
    assert not found["sweep.all.all.ran"].passed and found["sweep.all.all.ran"].blamed == ["c"]
    assert found["sweep.all.all.hang"].blamed == ["c"] and "fell silent" in found["sweep.all.all.hang"].detail


def test_cpu_check_fails_ranks_squeezed_onto_one_cpu():
    def nccl(host: str, cpus: int) -> str:
        return "".join(f'{outputs.CPUS_MARK}{{"host": "{host}", "rank": {r}, "local_rank": {r}, "cpus": {cpus}, '
                       f'"cpu_list": "0", "node_cpus": 64}}\n' for r in range(8))

    results = [{"name": "nccl-tests node a #1", "instrument": "nccl-tests", "scope": "node", "nodes": ["a"],
                "rc": 0, "stdout": nccl("a", 8)},
               {"name": "nccl-tests node b #1", "instrument": "nccl-tests", "scope": "node", "nodes": ["b"],
                "rc": 0, "stdout": nccl("b", 1)}]
    checks, seen = criteria.cpu_checks(results, ["a", "b"], 8, {"a": 64, "b": 64})
    found = by_id(checks)
    assert found["cpus.a"].passed and found["cpus.a"].threshold == 8
    assert not found["cpus.b"].passed and found["cpus.b"].blamed == ["b"] and found["cpus.b"].measured == 1
    assert seen["b"]["fewest"]["cpus"] == 1 and seen["b"]["ranks_seen"] == 8


def test_real_nccl_tests_output_and_the_transport_check(real_outputs: Path):
    text = (real_outputs / "nccl" / "all_reduce_a100_sxm4_40gb_oci_2node_16rank.txt").read_text()
    result = {"name": "n", "instrument": "nccl-tests", "scope": "all", "nodes": ["x", "y"], "rc": 0,
              "stdout": text, "stderr": ""}
    checks, medians = criteria.communication_checks([result], judge(gradient_bytes=8589934592))
    found = by_id(checks)
    assert found["nccl-tests.all.all.ran"].passed and found["nccl-tests.all.all.data"].passed
    assert medians["nccl-tests.all"]["x+y"] > 1
    transport = found["nccl-tests.all.all.transport"]
    assert not transport.passed and "no NET/IB" in transport.detail  # this log was taken without NCCL_DEBUG=INFO
    socket = dict(result, stdout=text + "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n")
    found = by_id(criteria.communication_checks([socket], judge(gradient_bytes=8589934592))[0])
    assert "fell back to sockets" in found["nccl-tests.all.all.transport"].detail
    ib = dict(result, stdout=text + "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n"
                                    "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n")
    assert by_id(criteria.communication_checks([ib], judge(gradient_bytes=8589934592))[0])[
        "nccl-tests.all.all.transport"].passed


def test_a_failed_job_fails_its_ran_check_naming_the_nodes():
    failed = {"name": "nccl-tests node a #1", "instrument": "nccl-tests", "scope": "node", "nodes": ["a"], "rc": 1,
              "stdout": "", "stderr": "srun: error: Unable to allocate resources"}
    checks, _ = criteria.communication_checks([failed], judge())
    assert [(c.id, c.passed, c.blamed) for c in checks] == [("nccl-tests.node.a.ran", False, ["a"])]
    assert "Unable to allocate" in checks[0].detail


def training_result(steps: int = 100, violation: dict | None = None, checksums=(1.0, 1.0, 1.0, 1.0),
                    slow_rank: int | None = None, loss_drop_min: float = 0.4) -> dict:
    """What the smoke trainer prints: the run's series and a summary per rank."""
    ranks = [{"rank": rank, "local_rank": rank % 2, "host": "a" if rank < 2 else "b", "device": "cpu", "cpus": 2,
              "cpu_list": "0-1", "node_cpus": 2, "compute_median_s": 0.09 if rank == slow_rank else 0.05,
              "compute_p90_s": 0.06, "wait_median_s": 0.01, "step_median_s": 0.1, "nccl_version": None}
             for rank in range(4)]
    facts = {"world": 4, "hosts": ["a", "a", "b", "b"], "backend": "gloo", "preset": "tiny", "device_name": "cpu",
             "steps_requested": 100, "steps_done": steps, "warmup_steps": 10, "parameters": 10, "bf16": False,
             "loss_drop_min": loss_drop_min, "bucket_mb": 100.0, "peak_tflops": None, "fault_injected": False,
             "violation": violation, "parameter_checksums": list(checksums), "elapsed_s": 1.0,
             "tokens_per_second": 1000.0, "mfu": None, "ranks": ranks,
             "series": {"mean_loss": [5.5 - 4.0 * step / steps for step in range(steps)],
                        "step_time_s": [0.1 if slow_rank is None or step % 2 else 0.3 for step in range(steps)]}}
    return {"name": "smoke training", "instrument": "train", "scope": "training", "nodes": ["a", "b"], "rc": 0,
            "stdout": "PROVISION-TRAIN " + json.dumps(facts) + "\n", "stderr": ""}


def test_a_healthy_training_passes_every_check():
    checks, summary = criteria.training_checks(training_result(), ["a", "b"], judge(warmup_steps=10))
    assert all(check.passed for check in checks), [c for c in checks if not c.passed]
    assert summary["steps_done"] == 100 and len(summary["mean_loss"]) == 100


def test_training_violations_are_named():
    violation = {"check": "grad_norm_consistency", "step": 20, "ranks": [3], "hosts": ["b"],
                 "norms": [1.0, 1.0, 1.0, 1.5]}
    found = by_id(criteria.training_checks(training_result(21, violation), ["a", "b"], judge())[0])
    grad = found["training.grad_norm_consistency"]
    assert not grad.passed and grad.blamed == ["b"] and "step 20: ranks [3] on b" in grad.detail
    assert not found["training.loss_decrease"].passed and "stopped at step 21" in found["training.loss_decrease"].detail
    found = by_id(criteria.training_checks(training_result(checksums=(1.0, 1.0, 2.0, 1.0), slow_rank=2),
                                           ["a", "b"], judge(warmup_steps=10))[0])
    assert found["training.parameter_checksum"].blamed == ["b"]
    cv = found["training.step_time_cv"]
    assert not cv.passed and cv.blamed == ["b"] and "slowest rank 2 on b" in cv.detail
    straggler = found["training.straggler"]
    assert not straggler.passed and straggler.blamed == ["b"] and "rank 2 on b: 90.0 ms per step (80% above)" in (
        straggler.detail)


def test_a_non_finite_gradient_norm_is_its_own_check():
    violation = {"check": "grad_norm_finite", "step": 12, "ranks": [1], "hosts": ["a"],
                 "norms": [0.7, "inf", 0.7, 0.7]}
    found = by_id(criteria.training_checks(training_result(13, violation), ["a", "b"], judge())[0])
    finite = found["training.grad_norm_finite"]
    assert not finite.passed and finite.blamed == ["a"] and "step 12: non-finite gradient norm on ranks [1]" in (
        finite.detail)
    assert found["training.grad_norm_consistency"].passed and found["training.loss_finite"].passed


def test_loss_drop_defaults_to_the_presets_figure():
    strict = training_result(loss_drop_min=0.75)  # the run drops from 5.5 to ~1.5: 70 %
    checks, summary = criteria.training_checks(strict, ["a", "b"], judge(warmup_steps=10))
    check = by_id(checks)["training.loss_decrease"]
    assert not check.passed and check.name == "loss falls by at least 75%" and summary["loss_drop_min"] == 0.75
    assert "preset tiny's figure for 100 steps" in check.detail
    inventory = by_id(criteria.training_checks(strict, ["a", "b"], judge(warmup_steps=10, loss_drop_min=0.5))[0])
    assert inventory["training.loss_decrease"].passed and "the inventory's" in inventory[
        "training.loss_decrease"].detail


def test_a_hung_training_blames_the_named_nodes():
    hung = dict(training_result(), rc=1, hung=True, hung_named=["b"], hung_detail="b: ranks 2,3 fell silent")
    checks = by_id(criteria.training_checks(hung, ["a", "b"], judge(), localised={"b"})[0])
    assert checks["training.ran"].blamed == ["b"] and checks["training.hang"].blamed == ["b"]


def test_a_refusing_rank_fails_the_run_naming_its_host():
    refusal = {"host": "b", "rank": 9, "local_rank": 1, "reason": "CUDA required: torch sees 1 GPU(s) for 8 ranks"}
    stdout = "PROVISION-REFUSED " + json.dumps(refusal) + "\n"
    trained = {"name": "smoke training", "instrument": "train", "scope": "training", "nodes": ["a", "b"], "rc": 1,
               "stdout": stdout, "stderr": "torchrun: child failed"}
    checks = criteria.training_checks(trained, ["a", "b"], judge())[0]
    assert [(c.id, c.passed, c.blamed) for c in checks] == [("training.ran", False, ["b"])]
    assert "b rank 9: CUDA required: torch sees 1 GPU(s) for 8 ranks" in checks[0].detail
    swept = {"name": "sweep all", "instrument": "sweep", "scope": "all", "nodes": ["a", "b"], "rc": 1,
             "stdout": stdout, "stderr": ""}
    ran = criteria.communication_checks([swept], judge())[0][0]
    assert not ran.passed and ran.blamed == ["b"]


def test_refusals_of_ranks_whose_lines_ran_together_are_all_read():
    # Two ranks of one node wrote at once: the second line landed before the first one's newline.
    first = {"host": "b", "rank": 3, "local_rank": 1, "reason": "CUDA required but torch sees no GPU"}
    second = {"host": "b", "rank": 2, "local_rank": 0, "reason": "CUDA required but torch sees no GPU"}
    stdout = f"PROVISION-REFUSED {json.dumps(first)}PROVISION-REFUSED {json.dumps(second)}\n\nother text\n"
    assert [r["rank"] for r in outputs.refusals(stdout)] == [2, 3]
    trained = {"name": "smoke training", "instrument": "train", "scope": "training", "nodes": ["a", "b"], "rc": 1,
               "stdout": stdout, "stderr": ""}
    checks = criteria.training_checks(trained, ["a", "b"], judge())[0]
    assert [(c.id, c.passed, c.blamed) for c in checks] == [("training.ran", False, ["b"])]
    assert "2 rank(s) refused to run on the CPU, on b" in checks[0].detail


def test_a_cut_marked_line_is_a_parse_error_not_a_crash():
    with pytest.raises(ParseError, match="unreadable PROVISION-TRAIN"):
        outputs.read_output("train", 'PROVISION-TRAIN {"ranks": [\n')
    assert outputs.read_output("sweep", 'noise PROVISION-SWEEP {"rows": []} more\n') == {"rows": []}


def test_reports(tmp_path: Path):
    results = [sweep_result("node", ["a"], 1.0), sweep_result("node", ["b"], 0.5), training_result()]
    checks, _ = criteria.communication_checks(results, judge())
    training_checks, training = criteria.training_checks(results[-1], ["a", "b"], judge(warmup_steps=10))
    checks += training_checks
    document = {"cluster": "c", "nodes": ["a", "b"], "started": "now", "duration_s": 1.0, "certified": False,
                "thresholds": {"source": "lab", "intra_node_gbps": 0.05, "inter_node_gbps": 0.02},
                "node_verdicts": criteria.node_verdicts(checks, ["a", "b"]),
                "checks": [c.as_dict() for c in checks], "curves": criteria.measurement_curves(results),
                "training": training, "nccl_versions": {"system": {"a": "2.18.5+cuda12.2", "b": "2.18.5+cuda12.2"},
                                                         "torch": {"a": "2.21.5"}}}
    report.write_json(tmp_path / "c.json", document)
    suites = ET.parse(report.write_junit(tmp_path / "c.xml", document)).getroot()
    assert {s.get("name"): s.get("failures") for s in suites} == {"a": "0", "b": "1", "fleet": "0"}
    page = report_html.write_html(tmp_path / "c.html", document).read_text()
    assert "NOT CERTIFIED" in page and "FAIL" in page
    assert "2.18.5+cuda12.2 on 2 nodes" in page and "PyTorch's own): 2.21.5 on 1 node" in page
    # summary first: b failed, with its evidence and the commands to take it out
    summary = page.index("<h2>Failures</h2>")
    assert summary < page.index("<h2>Nodes by check</h2>") < page.index("<h2>Checks</h2>")
    assert "<h3>b</h3>" in page and "provision drain b -i" in page and "provision replace-node b -i" in page
    assert "None" not in page.replace("None: every node", "")


def test_nccl_versions_per_node_from_nccl_tests_and_the_trainer(real_outputs: Path):
    text = (real_outputs / "nccl" / "all_reduce_h100_1node_8gpu_nccltests2.17.8.txt").read_text()
    trained = training_result()
    facts = json.loads(trained["stdout"].split("PROVISION-TRAIN ", 1)[1])
    for rank in facts["ranks"]:
        rank["nccl_version"] = "2.21.5"
    trained["stdout"] = "PROVISION-TRAIN " + json.dumps(facts) + "\n"
    results = [{"name": "n", "instrument": "nccl-tests", "scope": "node", "nodes": ["a"], "rc": 0, "stdout": text},
               {"name": "m", "instrument": "nccl-tests", "scope": "node", "nodes": ["b"], "rc": 1, "stdout": ""},
               trained]
    assert criteria.nccl_versions(results) == {"system": {"a": "2.29.2"}, "torch": {"a": "2.21.5", "b": "2.21.5"}}


def test_pip_pins_to_install_reads_pip_list():
    from provisioner.facts.packages import pip_pins_to_install

    listed = json.dumps([{"name": "torch", "version": "2.13.0+cpu"}, {"name": "NumPy", "version": "2.4.5"}])
    assert pip_pins_to_install(["torch==2.13.0", "numpy==2.4.6", "py_spy==1.0"], listed) == [
        "numpy==2.4.6", "py_spy==1.0"]
    assert pip_pins_to_install(["torch==2.13.0"], "") == ["torch==2.13.0"]  # no virtual environment yet


def _transport(stdout: str, expect_gdr: bool = True):
    table = (REAL_OUTPUTS / "nccl" / "all_reduce_a100_sxm4_40gb_oci_2node_16rank.txt").read_text()
    result = {"name": "n", "instrument": "nccl-tests", "scope": "all", "nodes": ["x", "y"], "rc": 0,
              "stdout": stdout + table, "stderr": ""}
    checks = by_id(criteria.communication_checks([result], judge(gradient_bytes=8589934592,
                                                                  expect_gdr=expect_gdr))[0])
    return checks["nccl-tests.all.all.transport"]


def _channels(*vias: str) -> str:
    return "".join(f"h:1:1 [0] NCCL INFO Channel {n:02d}/0 : 0[0] -> 8[0] [send] via {via}\n"
                   for n, via in enumerate(vias))


def test_transport_every_network_channel_must_be_ib_with_gdr():
    intra = "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
    assert _transport(intra + _channels("NET/IB/0/GDRDMA", "NET/IB/1/GDRDMA")).passed
    one_socket = _transport(_channels("NET/IB/0/GDRDMA", "NET/Socket/1"))
    assert not one_socket.passed and "1 of 2 network channels fell back to sockets" in one_socket.detail
    no_gdr = _transport(_channels("NET/IB/0/GDRDMA", "NET/IB/1"))
    assert not no_gdr.passed and "1 of 2 InfiniBand channels without GPUDirect RDMA" in no_gdr.detail
    assert _transport(_channels("NET/IB/0", "NET/IB/1"), expect_gdr=False).passed


def test_transport_ib_plugin_without_a_device_fails_even_with_ib_lines():
    log = ("h:1:1 [0] NCCL INFO NET/IB : No device found.\n"
           "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n" + _channels("NET/Socket/0"))
    check = _transport(log)
    assert not check.passed and "No device found" in check.detail


def _fleet_inventory(directory: Path, nodes: int) -> None:
    """The example inventory with `nodes` H100 nodes."""
    import yaml

    hosts_file = directory / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    hosts["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"] = {
        f"gpu{n:02d}": {"ansible_host": f"10.10.{n // 250 + 1}.{n % 250 + 1}"} for n in range(1, nodes + 1)}
    hosts_file.write_text(yaml.safe_dump(hosts))


@pytest.mark.parametrize("nodes", [2, 17, 128])
def test_dry_run_prints_disjoint_rounds_and_an_estimate_touching_nothing(example_inventory: Path, nodes: int,
                                                                           capsys, tmp_path: Path):
    from provisioner.cli import main

    _fleet_inventory(example_inventory, nodes)
    capsys.readouterr()
    assert main(["certify", "--inventory", str(example_inventory), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["nodes"]) == nodes and plan["estimate_s"] > 0 and "published" in plan["durations_source"]
    for round_jobs in plan["rounds"]:
        busy = [node for job in round_jobs for node in job["nodes"]]
        assert len(busy) == len(set(busy)) and {"instrument", "scope", "nodes"} <= set(round_jobs[0])
    scopes = [round_jobs[0]["scope"] for round_jobs in plan["rounds"]]
    assert scopes == ["node", "node", *(["pair"] * (0 if nodes < 3 else 2 if nodes % 2 == 0 else 3)),
                      "all", "all", "training", "resume", "node"]
    # the training saves a checkpoint 20 steps before its end on the checkpoints filesystem; a
    # second job, each node with the next node's ranks, resumes from it
    resumed = plan["rounds"][-2][0]
    assert resumed["instrument"] == "train" and resumed["nodes"] == plan["nodes"]
    # last, every node writes and reads its part of the example's 70B checkpoint at once
    storage = plan["rounds"][-1]
    assert [job["instrument"] for job in storage] == ["storage"] * nodes and plan["parts"][-1] == "storage"
    assert not (tmp_path / "runs").exists()  # no run record: nothing ran
    assert main(["certify", "--inventory", str(example_inventory), "--json"]) == 2


def test_dry_run_takes_the_durations_the_inventorys_last_certification_measured(example_inventory: Path, capsys,
                                                                                  tmp_path: Path):
    from provisioner.cli import main

    record = tmp_path / "runs" / "20261201T000000Z-certify"
    record.mkdir(parents=True)
    jobs_done = [{"instrument": "nccl-tests", "rc": 0, "start": "2026-12-01T00:00:00+00:00",
                  "end": "2026-12-01T00:00:12+00:00"},
                 {"instrument": "train", "rc": 0, "start": "2026-12-01T00:01:00+00:00",
                  "end": "2026-12-01T00:04:00+00:00"}]
    (record / "certification.json").write_text(json.dumps({"inventory": example_inventory.name,
                                                            "jobs": jobs_done}))
    capsys.readouterr()
    assert main(["certify", "--inventory", str(example_inventory), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["durations_s"]["nccl-tests"] == 12.0 and plan["durations_s"]["train"] == 180.0
    assert plan["durations_source"].startswith("measured: 20261201T000000Z-certify/certification.json")
