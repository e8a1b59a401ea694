"""The certification's driver, on the Slurm controller: runs the schedule's rounds as srun jobs
at the same time, watches every job for a hang, hands the outcomes to the schedule (which
localises what failed), and leaves everything in one folder for the CLI to fetch.

    python3 driver.pyz run DIR      # DIR/plan.json says what; runs to the end
    python3 driver.pyz status DIR   # DIR/status.json; finished once the driver is gone
    python3 driver.pyz cancel DIR   # ends the run: its jobs cancelled, what ran kept

One process for the whole fleet: each job is an srun process whose output goes to files in
DIR/jobs, read a little at a time (no thread, no SSH session, no Ansible fork per job). A job
whose ranks stop progressing for hang_timeout_s (its heartbeats, or for nccl-tests its output)
is cancelled, and the nodes whose ranks stopped first are named. Plain standard library
(Python 3.10 and newer).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner.certify.outputs import Watch, job_outcome
from provisioner.certify.schedule import (
    DEFAULT_DURATIONS_S,
    Job,
    JobOutcome,
    Limits,
    Round,
    Scheduler,
    base_rounds,
)
from provisioner.parsers import slurm

LAUNCHER = "/usr/local/sbin/provision-certify-launch"
JOB_NAME_PREFIX = "provision-certify"
POLL_S = 0.5
STATUS_EVERY_S = 1.0
KILL_AFTER_CANCEL_S = 45.0


def job_name(run_id: str, number: int) -> str:
    return f"{JOB_NAME_PREFIX}-{run_id}-{number}"


def cpus_per_task(job: Job, settings: dict[str, Any], node_cpus: dict[str, int]) -> int:
    """Every CPU of the node, shared among its tasks: nccl-tests runs a task per GPU, torchrun
    one task per node that starts every rank."""
    tasks = int(settings["procs_per_node"]) if job.instrument == "nccl-tests" else 1
    cpus = min((node_cpus.get(node, 0) for node in job.nodes), default=0)
    return max(1, cpus // max(1, tasks))


def srun_argv(job: Job, settings: dict[str, Any], name: str, node_cpus: dict[str, int]) -> list[str]:
    """The srun command line of one run of a job.

    Each job takes its nodes whole (--exclusive): every GPU (with ConstrainDevices=yes a step
    sees only the GPUs it asked for, and none without --gpus-per-node), all their memory, and
    every CPU: srun --exclusive for a step that makes its own allocation also means --exact, which
    gives a task one CPU unless --cpus-per-task says more."""
    per_node = int(settings["procs_per_node"]) if job.instrument == "nccl-tests" else 1
    argv = ["srun", f"--job-name={name}", f"--nodes={len(job.nodes)}", f"--nodelist={','.join(job.nodes)}",
            f"--ntasks-per-node={per_node}", f"--cpus-per-task={cpus_per_task(job, settings, node_cpus)}",
            "--exclusive", "--mem=0", "--kill-on-bad-exit=1", f"--time={settings['time_limit']}"]
    if int(settings.get("gpus_per_node") or 0) > 0:
        argv.append(f"--gpus-per-node={int(settings['gpus_per_node'])}")
    if job.instrument == "nccl-tests" and settings.get("mpi"):
        argv.append(f"--mpi={settings['mpi']}")
    if settings.get("partition"):
        argv.append(f"--partition={settings['partition']}")
    if settings.get("reservation"):
        argv.append(f"--reservation={settings['reservation']}")
    return [*argv, settings.get("launcher", LAUNCHER), job.instrument, *job.args]



@dataclass
class Plan:
    run_id: str
    nodes: list[str]
    parts: list[str]
    ranks_per_node: int
    repeats: int
    training_args: list[str]
    limits: dict[str, float]
    gradient_bytes: int
    straggler_percent: float
    settings: dict[str, Any]
    hang_timeout_s: float
    heartbeat_s: float
    max_concurrent: int = 1024
    durations_s: dict[str, float] = field(default_factory=dict)
    storage_args: list[str] = field(default_factory=list)
    resume_args: list[str] = field(default_factory=list)


@dataclass
class JobRun:
    """A job of the current round: its repeats one after the other, each an srun process."""

    job: Job
    index: int
    runs: list[dict[str, Any]] = field(default_factory=list)
    process: subprocess.Popen | None = None
    watch: Watch | None = None
    current: dict[str, Any] = field(default_factory=dict)
    reader: Any = None
    cancelled_at: float | None = None
    outcome: JobOutcome | None = None


class Driver:
    def __init__(self, directory: Path, plan: Plan):
        self.directory = directory
        self.plan = plan
        self.jobs_dir = directory / "jobs"
        self.jobs_dir.mkdir(exist_ok=True)
        self.scheduler = Scheduler(plan.nodes, tuple(plan.parts), plan.ranks_per_node, plan.repeats,
                                   plan.training_args, Limits(**plan.limits), plan.storage_args, plan.resume_args)
        # A healthy run's rounds, for the time left (read with every status: made once).
        self.base_rounds = base_rounds(plan.nodes, tuple(plan.parts), plan.ranks_per_node, plan.repeats,
                                       plan.training_args, plan.storage_args, plan.resume_args)
        self.started = time.time()
        self.clock0 = time.monotonic()
        self.stop_requested = False
        self.number = 0
        self.timeline: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.durations: dict[str, list[float]] = {}
        self.node_cpus: dict[str, int] = {}
        self.current_round: Round | None = None
        self.current_runs: list[JobRun] = []
        self._status_written = 0.0

    # ---- Slurm -------------------------------------------------------------------------
    def read_node_cpus(self) -> None:
        try:
            done = subprocess.run(["sinfo", "--Node", "--noheader", "--format", "%N|%c", "--nodes",
                                   ",".join(self.plan.nodes)], capture_output=True, text=True, timeout=120,
                                  check=False)
            self.node_cpus = slurm.node_cpus(done.stdout)
        except (OSError, subprocess.TimeoutExpired):
            self.node_cpus = {}

    def _start(self, job_run: JobRun) -> None:
        self.number += 1
        name = job_name(self.plan.run_id, self.number)
        repeat = len(job_run.runs) + 1
        stem = f"r{len(self.timeline):02d}-j{job_run.index:04d}-{repeat}"
        argv = srun_argv(job_run.job, self.plan.settings, name, self.node_cpus)
        out_path, err_path = self.jobs_dir / f"{stem}.out", self.jobs_dir / f"{stem}.err"
        environment = {**os.environ, "CERTIFY_HANG_TIMEOUT_S": f"{self.plan.hang_timeout_s:g}",
                       "CERTIFY_HEARTBEAT_S": f"{self.plan.heartbeat_s:g}"}
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            job_run.process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                               env=environment, start_new_session=True)
        job_run.reader = open(out_path, encoding="utf-8", errors="replace")  # noqa: SIM115 (read as it grows)
        now = time.monotonic()
        job_run.watch = Watch(job_run.job.nodes, now,
                              heartbeats=job_run.job.instrument not in ("nccl-tests", "storage"))
        job_run.current = {"repeat": repeat, "slurm_job_name": name, "argv": argv, "start": time.time(),
                           "stdout_file": f"jobs/{out_path.name}", "stderr_file": f"jobs/{err_path.name}",
                           "_clock": now}
        job_run.cancelled_at = None

    def _cancel(self, job_run: JobRun) -> None:
        """Cancel the run's Slurm job (its tasks get SIGCONT, SIGTERM, then SIGKILL)."""
        if job_run.cancelled_at is None:
            job_run.cancelled_at = time.monotonic()
            subprocess.run(["scancel", f"--name={job_run.current['slurm_job_name']}"], capture_output=True,
                           timeout=60, check=False)

    def _poll(self, job_run: JobRun, now: float) -> bool:
        """Read what the run printed; end it when hung. True once the run has ended."""
        assert job_run.process is not None and job_run.watch is not None
        job_run.watch.feed(job_run.reader.read(), now)
        rc = job_run.process.poll()
        if rc is None:
            limit = self.plan.hang_timeout_s
            if not job_run.watch.started_hosts and not job_run.watch.ranks:
                limit *= 2  # not yet on the nodes: Slurm may still be freeing them from the last round
            if job_run.cancelled_at is None and job_run.watch.stalled_for(now) > limit + self._grace():
                self._mark_hung(job_run, now, job_run.watch.hung(self.plan.heartbeat_s))
                self._cancel(job_run)
            elif job_run.cancelled_at is not None and now - job_run.cancelled_at > KILL_AFTER_CANCEL_S:
                job_run.process.kill()
            return False
        job_run.watch.feed(job_run.reader.read(), now)
        job_run.reader.close()
        run = job_run.current
        stall = job_run.watch.stalled_for(now)
        if rc != 0 and "hung" not in run and stall >= self.plan.hang_timeout_s / 2:
            # The ranks' own timeout (the process group's, nccl-tests' -T) ended a stalled job.
            hung = job_run.watch.hung(self.plan.heartbeat_s)
            if hung[0] or job_run.job.instrument == "nccl-tests":
                self._mark_hung(job_run, now, hung)
        run.update({"rc": rc, "end": time.time()})
        self.durations.setdefault(job_run.job.instrument, []).append(now - run.pop("_clock"))
        job_run.runs.append(run)
        job_run.process = None
        return True

    def _grace(self) -> float:
        """Time after the hang timeout for the ranks' own watchdog to report and exit first."""
        return max(10.0, 3 * self.plan.heartbeat_s)

    def _mark_hung(self, job_run: JobRun, now: float, hung: tuple[list[str], str]) -> None:
        """Record the run as hung, with the nodes its watch named and how."""
        assert job_run.watch is not None
        named, detail = hung
        stall = job_run.watch.stalled_for(now)
        job_run.current.update({"hung": True, "hung_named": named,
                                "hung_detail": f"no progress for {stall:.0f} s: {detail}"})

    # ---- rounds ------------------------------------------------------------------------
    def run_round(self, round_: Round) -> list[JobOutcome]:
        self.current_round = round_
        entry = {"name": round_.name, "kind": round_.kind, "start": time.time(), "end": None, "jobs": []}
        self.timeline.append(entry)
        runs = [JobRun(job, index) for index, job in enumerate(round_.jobs)]
        self.current_runs = runs
        queued = list(runs)
        running: list[JobRun] = []
        while queued or running:
            if self.stop_requested:
                for job_run in running:
                    self._cancel(job_run)
                queued = []
            while queued and len(running) < self.plan.max_concurrent:
                job_run = queued.pop(0)
                self._start(job_run)
                running.append(job_run)
            time.sleep(POLL_S)
            now = time.monotonic()
            for job_run in list(running):
                if not self._poll(job_run, now):
                    continue
                last = job_run.runs[-1]
                if last.get("hung") or last["rc"] != 0 or len(job_run.runs) >= job_run.job.repeats \
                        or self.stop_requested:
                    running.remove(job_run)
                    self._finish(job_run)
                else:
                    self._start(job_run)
            self.write_status()
        entry["end"] = time.time()
        outcomes = []
        for job_run in runs:
            if job_run.outcome is None:  # never started (a stop)
                job_run.outcome = JobOutcome(job_run.job, "failed", reason="not run: the certification was stopped")
            outcomes.append(job_run.outcome)
            entry["jobs"].append({"job": job_run.job.as_dict(), "runs": job_run.runs,
                                  "outcome": outcome_dict(job_run.outcome)})
        return outcomes

    def _finish(self, job_run: JobRun) -> None:
        runs = []
        for run in job_run.runs:
            runs.append({**run, "stdout": (self.directory / run["stdout_file"]).read_text(errors="replace"),
                         "stderr": (self.directory / run["stderr_file"]).read_text(errors="replace")})
        outcome = job_outcome(job_run.job, runs, self.plan.gradient_bytes, self.plan.straggler_percent)
        if self.stop_requested and outcome.status != "ok":
            outcome = JobOutcome(job_run.job, "failed", reason="stopped: the certification was cancelled")
        job_run.outcome = outcome
        if outcome.status != "ok" or outcome.stragglers:
            self.failures.append({"job": job_run.job.name, "nodes": job_run.job.nodes, "status": outcome.status,
                                  "named": outcome.named or outcome.stragglers, "reason": outcome.reason[:300],
                                  "at": time.time()})

    def run(self) -> None:
        self.read_node_cpus()
        interrupted = False
        try:
            while not self.stop_requested and (round_ := self.scheduler.next_round()) is not None:
                self.scheduler.record(self.run_round(round_))
            interrupted = self.stop_requested
        finally:
            self.write_results(interrupted)
            self.write_status(final=True, interrupted=interrupted)

    # ---- what the CLI reads ------------------------------------------------------------
    def _estimate_left(self) -> float:
        done_base = sum(1 for r in self.scheduler.rounds if r.kind == "base")
        measured = {instrument: statistics.median(values) for instrument, values in self.durations.items()}
        durations = {**DEFAULT_DURATIONS_S, **self.plan.durations_s, **measured}
        rest = self.base_rounds[done_base:]
        left = sum(durations[r.jobs[0].instrument] * r.jobs[0].repeats for r in rest)
        if self.current_round is not None and self.current_runs:
            elapsed = time.time() - self.timeline[-1]["start"]
            longest = max(durations[job.instrument] * job.repeats for job in self.current_round.jobs)
            left += max(0.0, longest - elapsed)
        return left

    def write_status(self, final: bool = False, interrupted: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._status_written < STATUS_EVERY_S:
            return
        self._status_written = now
        runs = self.current_runs
        round_ = self.current_round
        status = {
            "run_id": self.plan.run_id, "pid": os.getpid(), "started": self.started, "now": time.time(),
            "elapsed_s": round(now - self.clock0, 1), "finished": final, "interrupted": interrupted,
            "round": None if round_ is None else {
                "number": len(self.scheduler.rounds), "name": round_.name, "kind": round_.kind,
                "jobs": len(round_.jobs),
                "done": sum(1 for r in runs if r.outcome is not None),
                "running": sum(1 for r in runs if r.outcome is None and r.process is not None),
                "failed": sum(1 for r in runs if r.outcome is not None and r.outcome.status != "ok")},
            "rounds_done": len(self.scheduler.rounds) - (0 if final or round_ is None else 1),
            "base_rounds": len(self.base_rounds),
            "localise_rounds": sum(1 for r in self.scheduler.rounds if r.kind != "base"),
            "failures": self.failures[-50:], "failures_total": len(self.failures),
            "named": {node: why for node, why in self.scheduler.blamed.items()},
            "estimate_left_s": 0 if final else round(self._estimate_left()),
        }
        write_json(self.directory / "status.json", status)

    def write_results(self, interrupted: bool) -> None:
        results = {
            "run_id": self.plan.run_id, "started": self.started, "ended": time.time(),
            "interrupted": interrupted, "node_cpus": self.node_cpus, "rounds": self.timeline,
            "findings": [finding.as_dict() for finding in self.scheduler.findings],
            "blamed": self.scheduler.blamed, "excluded": self.scheduler.excluded,
        }
        write_json(self.directory / "results.json", results)
        with tarfile.open(self.directory / "outputs.tar.gz.part", "w:gz") as archive:
            archive.add(self.directory / "results.json", arcname="results.json")
            archive.add(self.jobs_dir, arcname="jobs")
        os.replace(self.directory / "outputs.tar.gz.part", self.directory / "outputs.tar.gz")


def outcome_dict(outcome: JobOutcome) -> dict[str, Any]:
    return {key: value for key, value in asdict(outcome).items() if key != "job"}


def write_json(path: Path, value: Any) -> None:
    temporary = path.with_suffix(".part")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)


def load_plan(directory: Path) -> Plan:
    return Plan(**json.loads((directory / "plan.json").read_text()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status(directory: Path) -> dict[str, Any]:
    """The driver's status; finished (crashed) when its process is gone without a last word."""
    try:
        current = json.loads((directory / "status.json").read_text())
    except (OSError, ValueError):
        pid_file = directory / "driver.pid"
        pid = int(pid_file.read_text()) if pid_file.exists() else 0
        alive = bool(pid) and _alive(pid)
        return {"finished": not alive, "crashed": not alive, "starting": alive, "round": None, "failures": [],
                "named": {}, "estimate_left_s": None}
    if not current.get("finished") and not _alive(int(current.get("pid", 0))):
        current.update({"finished": True, "crashed": True})
    return current


def cancel(directory: Path) -> dict[str, Any]:
    """Ask the driver to stop (it cancels its jobs and writes what ran), and wait for it."""
    current = status(directory)
    pid = int(current.get("pid") or 0)
    if pid and not current.get("finished"):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_AFTER_CANCEL_S + 30
        while time.monotonic() < deadline and not status(directory).get("finished"):
            time.sleep(1)
    if not (directory / "outputs.tar.gz").exists():
        # The driver died without its results: cancel whatever it left in Slurm.
        plan = load_plan(directory)
        names = subprocess.run(["squeue", "--noheader", "--format", "%j"], capture_output=True, text=True,
                               check=False).stdout.split()
        for name in sorted(set(names)):
            if name.startswith(f"{JOB_NAME_PREFIX}-{plan.run_id}-"):
                subprocess.run(["scancel", f"--name={name}"], capture_output=True, check=False)
    return status(directory)


def _raise_open_files_limit() -> None:
    """A round may read a thousand jobs' outputs at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="driver.pyz", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "status", "cancel"])
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    directory: Path = args.directory
    if args.action == "status":
        print(json.dumps(status(directory)))
        return 0
    if args.action == "cancel":
        print(json.dumps(cancel(directory)))
        return 0
    (directory / "driver.pid").write_text(str(os.getpid()))
    _raise_open_files_limit()
    driver = Driver(directory, load_plan(directory))

    def stop(signum: int, frame: Any) -> None:
        driver.stop_requested = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    driver.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
