"""A real Grid Engine cell for the session (tests/gridengine/gridengine_cluster.sh), and job submission.

The cell (Debian's Son of Grid Engine 8.1.9: sge_qmaster on n1, sge_execd on n1 and n2, two slots each) runs on two
hosts made of network, UTS and mount namespaces under a state dir; clients run on n1 through the script's `exec`.
Needs root (it installs Grid Engine with apt on a fresh machine and creates namespaces); otherwise every test is
skipped with the reason, which tests/conftest.py turns into a failure under CI=true.

A job is submitted with the real qsub and waited for by polling `qstat -j` until Grid Engine no longer knows it; its
accounting records (what `qacct -j` prints) then say how it ended: one per run of the job script, one per task a
parallel job started on a host through `qrsh -inherit`.

Knobs: HPCDIST_VENV (the venv whose hpcdist the jobs run; default: the one running pytest),
HPCDIST_GRIDENGINE_STATE (state dir; default /tmp/hpcdist-gridengine-PID), HPCDIST_GRIDENGINE_KEEP=1 (leave the
cell up after the session, for `gridengine_cluster.sh exec STATE -- qstat -f` & co.).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcdist.schedulers import lookup

SCRIPT = Path(__file__).resolve().parent / "gridengine_cluster.sh"
UP_TIMEOUT = 600.0  # seconds for `up`, which includes apt-get update + install on a fresh machine
POLL = 0.25  # seconds between `qstat -j` polls
RESCHEDULED = "25"  # the `failed` of a run that ended in exit status 99: rescheduled (sge_conf(5), accounting(5))
ACCOUNTING = "root/hpcdist/common/accounting"  # $SGE_ROOT/$SGE_CELL/common/accounting in the state dir
# the fields of an accounting file line, in order (accounting(5) of Son of Grid Engine 8.1.9)
ACCOUNTING_FIELDS = (
    *("qname", "hostname", "group", "owner", "job_name", "job_number", "account", "priority", "submission_time"),
    *("start_time", "end_time", "failed", "exit_status", "ru_wallclock", "ru_utime", "ru_stime", "ru_maxrss"),
    *("ru_ixrss", "ru_ismrss", "ru_idrss", "ru_isrss", "ru_minflt", "ru_majflt", "ru_nswap", "ru_inblock"),
    *("ru_oublock", "ru_msgsnd", "ru_msgrcv", "ru_nsignals", "ru_nvcsw", "ru_nivcsw", "project", "department"),
    *("granted_pe", "slots", "task_number", "cpu", "mem", "io", "category", "iow", "pe_taskid", "maxvmem", "arid"),
    "ar_sub_time",
)
# the only variables of the pytest process that reach qsub: no OMPI_*, PE_*, CI or PYTEST_* leaks into a job (qsub
# passes none without -V or -v anyway)
_PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")
_RECORD_SEPARATOR = re.compile(r"^=+$", re.MULTILINE)
_FIELD = re.compile(r"^(\S+)\s+(.*?)\s*$")

_timings: list[tuple[str, float]] = []


class SubmitRejected(Exception):
    """qsub refused the job; the message is qsub's output."""


@dataclass(frozen=True)
class JobResult:
    """A finished job: the accounting records of each run of its script and of its tasks, and its output files."""

    job_id: str
    runs: tuple[dict[str, str], ...]  # one per run of the job script (pe_taskid NONE), oldest first
    tasks: tuple[dict[str, str], ...]  # one per task started through `qrsh -inherit` (Open MPI's daemons)
    stdout: str
    stderr: str
    seconds: float  # from qsub to the accounting record of the last run

    @property
    def exit_status(self) -> int:
        """The last run's exit status."""
        return int(self.runs[-1]["exit_status"])

    @property
    def ok(self) -> bool:
        """The last run ended with exit status 0, and Grid Engine saw no failure."""
        return self.exit_status == 0 and self.runs[-1]["failed"] == "0"

    def describe(self) -> str:
        """A failure message: each run's host, failure and exit status, and both output files."""
        runs = "; ".join(f"{r['hostname']}: failed {r['failed']}, exit_status {r['exit_status']}" for r in self.runs)
        return (
            f"job {self.job_id} after {self.seconds:.1f} s, runs: {runs}\n"
            f"--- stdout ---\n{self.stdout}--- stderr ---\n{self.stderr}"
        )


@dataclass(frozen=True)
class Cell:
    """A running test cell: where its state lives and how to run Grid Engine clients against it."""

    state: Path
    venv: Path
    Rejected = SubmitRejected  # what qsub() raises, reachable from tests without importing conftest

    def run(
        self, *argv: str, timeout: float = 30, cwd: Path | None = None, host: str = "n1"
    ) -> subprocess.CompletedProcess[str]:
        """Run a Grid Engine client (qsub, qstat, qacct…) on `host`, in `cwd`."""
        env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
        return subprocess.run(
            ["bash", str(SCRIPT), "exec", str(self.state), "--on", host, "--", *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def qsub(self, script_text: str, workdir: Path, *options: str) -> str:
        """Write the script into `workdir`, submit it from there with qsub, and return the job id (read from qsub's
        sentence by hpcdist's own parser)."""
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / f"job{len(list(workdir.glob('job*.sh')))}.sh"
        path.write_text(script_text)
        proc = self.run("qsub", *options, str(path), cwd=workdir)
        if proc.returncode != 0:
            raise SubmitRejected((proc.stdout + proc.stderr).strip() or f"qsub exited {proc.returncode}, silent")
        return lookup("gridengine").submitted(proc.stdout)

    def clients(self, folder: Path) -> str:
        """A PATH with `folder` first, holding qsub, qstat, qdel and qconf that run Grid Engine's own on n1, as a
        login node's would: what hpcdist.submit finds and runs."""
        folder.mkdir(parents=True, exist_ok=True)
        for command in ("qsub", "qstat", "qdel", "qconf"):
            real = shutil.which(command)  # by its full path: inside n1 this folder is first on PATH too
            assert real is not None, f"{command} is not on PATH"
            wrapper = folder / command
            argv = shlex.join(["bash", str(SCRIPT), "exec", str(self.state), "--on", "n1", "--", real])
            wrapper.write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
            wrapper.chmod(0o755)
        return f"{folder}{os.pathsep}{os.environ.get('PATH', os.defpath)}"

    def accounting(self, job_id: str) -> list[dict[str, str]]:
        """The job's records in the cell's accounting file (accounting(5)), oldest first: what `qacct -j` reads and
        prints, plus pe_taskid, which qacct leaves out (NONE for a run of the job script, `1.n2` for a task)."""
        try:
            lines = (self.state / ACCOUNTING).read_text().splitlines()
        except FileNotFoundError:
            return []
        records = (dict(zip(ACCOUNTING_FIELDS, line.split(":"), strict=True)) for line in lines if line[:1] != "#")
        return [record for record in records if record.get("job_number") == job_id]

    def qacct(self, job_id: str) -> list[dict[str, str]]:
        """What `qacct -j ID` prints, record by record (its field names: `jobnumber`, `failed` with its reason)."""
        proc = self.run("qacct", "-j", job_id)
        assert proc.returncode == 0, f"qacct -j {job_id} failed: {proc.stdout}{proc.stderr}"
        parts = _RECORD_SEPARATOR.split(proc.stdout)
        return [{m[1]: m[2] for m in map(_FIELD.match, part.splitlines()) if m} for part in parts if part.strip()]

    def submit(self, script_text: str, timeout: float, workdir: Path, *options: str) -> JobResult:
        """Submit, poll until the job ends, and return its result; on timeout delete it and fail the test."""
        start = time.monotonic()
        return self.wait(self.qsub(script_text, workdir, *options), timeout, workdir, start)

    def wait(self, job_id: str, timeout: float, workdir: Path, start: float | None = None) -> JobResult:
        """Poll `qstat -j` until Grid Engine no longer knows the job and has accounted for its last run; on timeout
        delete the job and fail the test, with what `qstat -j` said last (its state, and an error's reason)."""
        start = time.monotonic() if start is None else start
        said = ""
        while True:
            shown = self.run("qstat", "-j", job_id)
            if shown.returncode == 0:
                said = shown.stdout
            else:  # ended: the qmaster writes its accounting record at once (accounting_flush_time 0)
                records = self.accounting(job_id)
                runs = [r for r in records if r.get("pe_taskid") == "NONE"]
                if runs and runs[-1]["failed"] != RESCHEDULED:
                    break
            if time.monotonic() - start > timeout:
                self.run("qdel", job_id)
                pytest.fail(
                    f"job {job_id} did not end within {timeout:g} s; deleted it. What `qstat -j` said last:\n"
                    f"{_tail(said)}--- job.out (end) ---\n{_tail(_read(workdir / 'job.out'))}"
                    f"--- job.err (end) ---\n{_tail(_read(workdir / 'job.err'))}",
                    pytrace=False,
                )
            time.sleep(POLL)
        seconds = time.monotonic() - start
        _timings.append((f"job {job_id}", seconds))
        tasks = tuple(r for r in records if r.get("pe_taskid") != "NONE")
        return JobResult(job_id, tuple(runs), tasks, _read(workdir / "job.out"), _read(workdir / "job.err"), seconds)


def _read(path: Path) -> str:
    """A job output file's text, or '' when there is none."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(text: str, lines: int = 30) -> str:
    """The last lines of a text, each ending in a newline."""
    return "".join(line + "\n" for line in text.splitlines()[-lines:])


def _cannot_run() -> str | None:
    """Why this machine cannot host the test cell, or None when it can."""
    if sys.platform != "linux":
        return f"the Grid Engine test cell needs Linux namespaces, not {sys.platform}"
    if os.geteuid() != 0:
        return "the Grid Engine test cell needs root (apt-get install, sge_qmaster, namespaces); run as root"
    for tool in ("nsenter", "unshare", "ip", "findmnt", "mount"):
        if shutil.which(tool) is None:
            return f"the Grid Engine test cell needs `{tool}` (util-linux / iproute2), which is not on PATH"
    if shutil.which("sge_qmaster", path="/usr/sbin") is None and shutil.which("apt-get") is None:
        return "Grid Engine is not installed and there is no apt-get to install it (gridengine-master -exec -client)"
    return None


def _cell_script(command: str, state: Path) -> subprocess.CompletedProcess[str]:
    """Run gridengine_cluster.sh COMMAND STATE, timed."""
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), command, str(state)],
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    _timings.append((f"cell {command}", time.monotonic() - start))
    return proc


@pytest.fixture(scope="session")
def gridengine_cell() -> Iterator[Cell]:
    """Bring the cell up once per session and down at the end (unless HPCDIST_GRIDENGINE_KEEP=1)."""
    reason = _cannot_run()
    if reason:
        pytest.skip(reason)
    venv = Path(os.environ.get("HPCDIST_VENV") or sys.prefix).resolve()
    if not (venv / "bin" / "hpcdist").exists():
        pytest.fail(
            f"{venv}/bin/hpcdist does not exist; set HPCDIST_VENV to a venv with hpcdist installed "
            "(e.g. the .venv that `make env` creates)",
            pytrace=False,
        )
    state = Path(os.environ.get("HPCDIST_GRIDENGINE_STATE") or f"/tmp/hpcdist-gridengine-{os.getpid()}")
    up = _cell_script("up", state)
    if up.returncode != 0:
        down = _cell_script("down", state)
        pytest.fail(
            f"gridengine_cluster.sh up {state} failed (exit {up.returncode}):\n{up.stderr}{down.stderr}", pytrace=False
        )
    yield Cell(state, venv)
    if os.environ.get("HPCDIST_GRIDENGINE_KEEP") == "1":
        print(f"\nHPCDIST_GRIDENGINE_KEEP=1: cell left up; stop it with: bash {SCRIPT} down {state}")
        return
    down = _cell_script("down", state)
    assert down.returncode == 0, f"gridengine_cluster.sh down {state} failed:\n{down.stderr}"


@pytest.fixture
def cell(gridengine_cell: Cell) -> Cell:
    """The session's cell, for tests that run clients themselves."""
    return gridengine_cell


@pytest.fixture
def venv(gridengine_cell: Cell) -> Path:
    """The venv the jobs run hpcdist from."""
    return gridengine_cell.venv


@pytest.fixture
def submit(gridengine_cell: Cell, tmp_path: Path) -> Callable[..., JobResult]:
    """submit(script_text, timeout=120, *qsub_options) -> JobResult; the job runs in this test's tmp_path and writes
    job.out and job.err there."""

    def _submit(script_text: str, timeout: float = 120, *options: str) -> JobResult:
        return gridengine_cell.submit(script_text, timeout, tmp_path, *options)

    return _submit


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How long bringing the cell up and down and each job took."""
    if _timings:
        terminalreporter.write_sep("-", "Grid Engine test cell timings")
        for what, seconds in _timings:
            terminalreporter.write_line(f"{what:<20} {seconds:6.1f} s")
