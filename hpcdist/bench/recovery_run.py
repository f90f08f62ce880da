"""`hpcdist bench recovery`'s runs: one job at a time on this host, its step log watched, the last rank SIGKILLed at
the fixed step of epoch 2 (found by its rank variable in /proc), the job waited for; then the table or the JSON."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

from .. import proctree, records
from ..errors import UsageError
from ..workloads import steplog
from .plan import BenchOptions
from .recovery import (
    BATCH,
    EPOCHS,
    KILL_EPOCH,
    KILL_STEP,
    ROWS,
    SAMPLES,
    Outcome,
    RecoveryPlan,
    Row,
    job_argv,
    outcome,
    recovery_plan,
    table_lines,
)
from .startup_run import kill_tree, machine_facts

__all__ = ["TOOL", "report_lines", "run_recovery"]

TOOL = "hpcdist bench recovery"
POLL = 0.005  # seconds between reads of the step log while waiting for the step to kill at


def run_recovery(options: BenchOptions, out: IO[str] | None = None) -> int:
    """Measure (or, with --from, reread) and show; 1 if a job where a rank was killed never recovered, or the run was
    interrupted."""
    out = out or sys.stdout
    if options.source is not None:
        from .plot import load_run

        doc = load_run(options.source)
        if doc["tool"] != TOOL:
            raise UsageError(f"--from {options.source} is not a saved `{TOOL}` run; give the file its --json wrote")
        _show(doc, out, options.json)
        return 0
    if os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or os.environ.get("WORLD_SIZE"):
        raise UsageError("bench recovery launches its own jobs; run it directly, not under a launcher")
    plan = recovery_plan(options)
    found = _launchers(plan)
    before = machine_facts("before")
    outcomes = []
    jobs = [(repeat, name) for repeat in range(plan.repeats) for name in _rotated(plan.rows, repeat)]
    signal.signal(signal.SIGTERM, _interrupt)  # `kill PID` ends a long run early, keeping what it measured
    for index, (repeat, name) in enumerate(jobs, 1):
        try:
            result = _run_job(ROWS[name], repeat, plan, found)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the job's processes are gone, the rest is shown
            print(f"{TOOL}: interrupted at {name}, repeat {repeat + 1}", file=sys.stderr, flush=True)
            break
        outcomes.append(result)
        took = f"next step {result.recovered:.2f} s after the kill, " if result.recovered is not None else ""
        print(
            f"{TOOL}: [{index}/{len(jobs)}] {name}: {took}job {result.total:.1f} s, exit status {result.status}"
            + (f"; {result.problem}" if result.problem else ""),
            file=sys.stderr,
            flush=True,
        )
    doc = {
        "version": 1,
        "tool": TOOL,
        "config": {
            "ranks": plan.ranks,
            "rows": list(plan.rows),
            "repeats": plan.repeats,
            "timeout": plan.timeout,
            "samples": SAMPLES,
            "batch_size": BATCH,
            "epochs": EPOCHS,
            "kill": {"rank": plan.ranks - 1, "epoch": KILL_EPOCH, "step": KILL_STEP, "signal": "SIGKILL"},
        },
        "environment": {**before, **machine_facts("after")},
        "results": [o.as_json() for o in outcomes],
    }
    _show(doc, out, plan.json)
    return 1 if len(outcomes) < len(jobs) or any(ROWS[o.row].kill and o.recovered is None for o in outcomes) else 0


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The header (date, machine, load, the job and the kill), the table, and what each row does."""
    env, config = doc["environment"], doc["config"]
    kill = config["kill"]
    outcomes = [Outcome(**{**r, "killed_after": tuple(r["killed_after"] or ()) or None}) for r in doc["results"]]
    steps = config["samples"] // (config["batch_size"] * config["ranks"])
    return [
        f"# {env['date']}: {env['host_os']}, {env['cores']} cores, {env['memory_gb']:.0f} GB; load average "
        f"{env['load_before']:.2f} before, {env['load_after']:.2f} after; {config['repeats']} repeats per row",
        f"# the job: hpcdist run ddp (an MLP of 16-64-64-1, gloo, CPU), {config['ranks']} ranks on this host, "
        f"{config['samples']} samples, batch {config['batch_size']} per rank, {config['epochs']} epochs of {steps} "
        f"steps; rank {kill['rank']} gets {kill['signal']} once rank 0 has logged epoch {kill['epoch']} step "
        f"{kill['step']}",
        f"# {env['versions']}",
        "# seconds, median (min-max); `past the kill`: a step beyond the last one the job completed before it "
        "recovered; `redone`: steps completed a second time; `launch -> 1st step`: the job's own start-up, launch to "
        "its first step; `ms/step`: the median time between two steps in a row",
        *table_lines(config["rows"], outcomes),
        *(f"# {name}: {ROWS[name].label}" for name in config["rows"] if name in ROWS),
    ]


def _show(doc: dict[str, Any], out: IO[str], as_json: bool) -> None:
    """Print the JSON document, or the table."""
    text = json.dumps(doc, indent=1) if as_json else "\n".join(report_lines(doc))
    print(text, file=out, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the run stops at the job it is in and shows what it measured."""
    raise KeyboardInterrupt


def _rotated(rows: tuple[str, ...], repeat: int) -> tuple[str, ...]:
    """The rows rotated one place per repeat, so that no row always runs first or last."""
    turn = repeat % len(rows)
    return rows[turn:] + rows[:turn]


def _launchers(plan: RecoveryPlan) -> dict[str, str]:
    """hpcdist and torchrun beside this Python or on PATH; a row whose launcher is missing is refused."""
    beside = os.path.dirname(sys.executable)
    found = {}
    for name in ("hpcdist", "torchrun"):
        path = os.path.join(beside, name)
        found[name] = path if os.access(path, os.X_OK) else shutil.which(name) or ""
    for row in plan.rows:
        if not found[ROWS[row].launcher]:
            raise UsageError(
                f"row {row} needs {ROWS[row].launcher}, found neither beside {sys.executable} nor on PATH; "
                f"install it or leave the row out with --rows"
            )
    return found


def _run_job(row: Row, repeat: int, plan: RecoveryPlan, found: dict[str, str]) -> Outcome:
    """Launch one job, kill its last rank at the fixed step (for a row that kills), wait for it: its Outcome."""
    folder = tempfile.mkdtemp(prefix="hpcdist-recovery-")
    try:
        log = os.path.join(folder, "steps.log")
        argv = job_argv(row, plan.ranks, found["hpcdist"], found["torchrun"], log, os.path.join(folder, "ckpt"))
        with open(os.path.join(folder, "output.log"), "w+b") as output:
            start, launched = time.perf_counter(), time.time()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=dict(os.environ, **dict(row.env)),
                start_new_session=True,
            )
            deadline = time.monotonic() + plan.timeout
            kill_time, problem = None, ""
            try:
                if row.kill:
                    kill_time, problem = _kill_at_step(proc, row, plan.ranks - 1, log, deadline)
                status = proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                status, problem = -1, f"ran past the {plan.timeout:g} s timeout per job (see --timeout)"
            finally:
                if proc.poll() is None:
                    kill_tree(proc.pid)
                    proc.wait()
            total = time.perf_counter() - start
            output.seek(0)
            tail = output.read().decode(errors="replace").strip().splitlines()[-3:]
        steps = steplog.read(log) if os.path.exists(log) else []
        result = outcome(row.name, repeat, status, launched, total, steps, kill_time)
        if problem or status != 0:
            said = " | ".join(tail) or "no output"
            why = problem or result.problem or "the job failed"
            return records.replace(result, problem=f"{why}; its output ends: {said}")
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _kill_at_step(
    proc: subprocess.Popen[bytes], row: Row, victim: int, log: str, deadline: float
) -> tuple[float | None, str]:
    """Wait until rank 0 logs epoch KILL_EPOCH step KILL_STEP, SIGKILL rank `victim`: (the kill's time.time(), "")
    or (None, why no rank was killed)."""
    seen = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, f"the job ended before epoch {KILL_EPOCH} step {KILL_STEP} (exit status {proc.returncode})"
        if os.path.exists(log):
            with open(log, encoding="ascii", errors="replace") as handle:
                seen = handle.read()
            lines = seen.split("\n")[:-1]
            if lines and tuple(map(int, lines[-1].split()[:2])) >= (KILL_EPOCH, KILL_STEP):
                pid = _rank_pid(proc.pid, row.rank_var, victim)
                if pid is None:
                    return None, f"no process with {row.rank_var}={victim} below the launcher (pid {proc.pid})"
                when = time.time()
                os.kill(pid, signal.SIGKILL)
                return when, ""
        time.sleep(POLL)
    raise subprocess.TimeoutExpired(proc.args, 0)


def _rank_pid(launcher: int, variable: str, rank: int) -> int | None:
    """The uppermost process below `launcher` whose environment says `variable`=`rank` (hpcdist's per-rank shim runs
    the program in itself; its children, such as the output tagger, inherit the variable)."""
    wanted = str(rank).encode()
    for pid in proctree.descendants(launcher):  # descendants are listed parents first
        if (proctree.environ(pid) or {}).get(variable.encode()) == wanted:
            return pid
    return None
