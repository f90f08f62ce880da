"""A real four-node Slurm cluster for the session (tests/cluster/slurm_cluster.sh), and job submission.

The cluster (slurmctld, slurmd node1 to node4, a private munged) runs in a network namespace of
its own under a state dir; clients reach it through `nsenter --net=STATE/netns` with SLURM_CONF set.
Needs root (it installs Slurm with apt on a fresh machine and creates namespaces).

Knobs: HPCDIST_VENV (the venv whose hpcdist the jobs run; default: the one running pytest),
HPCDIST_SLURM_STATE (state dir; default /tmp/hpcdist-slurm-PID), HPCDIST_SLURM_KEEP=1 (leave the
cluster up after the session, for `slurm_cluster.sh exec STATE -- squeue` & co.).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "slurm_cluster.sh"
UP_TIMEOUT = 600.0  # seconds for `up`, which includes apt-get update + install on a fresh machine
POLL = 0.25  # seconds between `scontrol show job` polls
# a job in one of these states will not change any more
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
# the only variables of the pytest process that reach sbatch (and so the job): no OMPI_*, SLURM_*,
# RANK, MASTER_*, CI or PYTEST_* leaks into a job, as if it were submitted from a fresh login shell
_PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")

_timings: list[tuple[str, float]] = []


class SubmitRejected(Exception):
    """sbatch refused the job; the message is sbatch's stderr."""


@dataclass(frozen=True)
class JobResult:
    """A finished batch job: its final state, exit status and the contents of its output files."""

    job_id: str
    state: str
    exit_code: int
    signal: int
    reason: str
    nodes: str
    stdout: str
    stderr: str
    seconds: float  # from sbatch to the final state
    fields: dict[str, str] = field(repr=False, default_factory=dict)  # everything `scontrol show job` said

    @property
    def ok(self) -> bool:
        """COMPLETED with exit code 0."""
        return self.state == "COMPLETED" and self.exit_code == 0 and self.signal == 0

    def describe(self) -> str:
        """A failure message: state, exit code, and both output files."""
        return (
            f"job {self.job_id} ended {self.state} (exit {self.exit_code}:{self.signal}, reason {self.reason}) "
            f"on {self.nodes} after {self.seconds:.1f} s\n--- stdout ---\n{self.stdout}--- stderr ---\n{self.stderr}"
        )


@dataclass(frozen=True)
class Cluster:
    """A running test cluster: where its state lives and how to run Slurm clients against it."""

    state: Path
    venv: Path
    Rejected = SubmitRejected  # what sbatch() raises, reachable from tests without importing conftest

    @property
    def conf(self) -> Path:
        """The cluster's slurm.conf (what SLURM_CONF must point at)."""
        return self.state / "etc" / "slurm.conf"

    def client_env(self) -> dict[str, str]:
        """The environment for sbatch and other clients: a login shell's few variables plus SLURM_CONF."""
        env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
        return {**env, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (sbatch, scontrol, squeue…) inside the cluster's network namespace."""
        return subprocess.run(
            ["nsenter", f"--net={self.state / 'netns'}", "--", *argv],
            cwd=cwd,
            env=self.client_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def sbatch(self, script_text: str, workdir: Path, *options: str) -> str:
        """Write the script into `workdir`, submit it from there, and return the job id."""
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / f"job{len(list(workdir.glob('job*.sh')))}.sh"
        path.write_text(script_text)
        proc = self.run("sbatch", "--parsable", *options, str(path), cwd=workdir)
        if proc.returncode != 0:
            raise SubmitRejected(proc.stderr.strip() or f"sbatch exited {proc.returncode} and printed nothing")
        return proc.stdout.strip().split(";")[0]

    def job_fields(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o ID` as a dict (empty when Slurm no longer knows the job)."""
        proc = self.run("scontrol", "show", "job", "-o", job_id)
        return dict(re.findall(r"(\w+)=(\S*)", proc.stdout)) if proc.returncode == 0 else {}

    def submit(self, script_text: str, timeout: float, workdir: Path, *options: str) -> JobResult:
        """Submit, poll until the job ends, and return its result; on timeout cancel it and fail the test."""
        start = time.monotonic()
        return self.wait(self.sbatch(script_text, workdir, *options), timeout, start)

    def wait(self, job_id: str, timeout: float, start: float | None = None) -> JobResult:
        """Poll until the job is in a final state and return its result; on timeout cancel it and fail the test."""
        start = time.monotonic() if start is None else start
        fields: dict[str, str] = {}
        while True:
            fields = self.job_fields(job_id) or fields
            state = fields.get("JobState", "UNKNOWN")
            if state in FINAL_STATES:
                break
            if time.monotonic() - start > timeout:
                self.run("scancel", job_id)
                out, err = (_tail(_read(fields.get(k, ""))) for k in ("StdOut", "StdErr"))
                pytest.fail(
                    f"job {job_id} did not end within {timeout:g} s: its last state was {state} "
                    f"(reason {fields.get('Reason', '?')}, nodes {fields.get('NodeList', '?')}); "
                    f"cancelled it.\n--- stdout (end) ---\n{out}--- stderr (end) ---\n{err}",
                    pytrace=False,
                )
            time.sleep(POLL)
        seconds = time.monotonic() - start
        code, _, sig = fields.get("ExitCode", "0:0").partition(":")
        _timings.append((f"job {job_id}", seconds))
        return JobResult(
            job_id,
            state,
            int(code or 0),
            int(sig or 0),
            fields.get("Reason", ""),
            fields.get("NodeList", ""),
            _read(fields.get("StdOut", "")),
            _read(fields.get("StdErr", "")),
            seconds,
            fields,
        )


def _read(path: str) -> str:
    """A job output file's text, or '' when there is none."""
    try:
        return Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return ""


def _tail(text: str, lines: int = 30) -> str:
    """The last lines of a text, each ending in a newline."""
    return "".join(line + "\n" for line in text.splitlines()[-lines:])


def _cannot_run() -> str | None:
    """Why this machine cannot host the test cluster, or None when it can."""
    if sys.platform != "linux":
        return f"the Slurm test cluster needs Linux namespaces, not {sys.platform}"
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (apt-get install, munged, slurmd, network namespaces); run as root"
    for tool in ("nsenter", "unshare", "ip", "findmnt", "mount"):
        if shutil.which(tool) is None:
            return f"the Slurm test cluster needs `{tool}` (util-linux / iproute2), which is not on PATH"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return (
            "Slurm is not installed and there is no apt-get to install it "
            "(slurmctld slurmd slurm-client munge libpmix2)"
        )
    return None


def _cluster_script(command: str, state: Path) -> subprocess.CompletedProcess[str]:
    """Run slurm_cluster.sh COMMAND STATE, timed."""
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), command, str(state)],
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    _timings.append((f"cluster {command}", time.monotonic() - start))
    return proc


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    """Bring the four-node cluster up once per session and down at the end (unless HPCDIST_SLURM_KEEP=1)."""
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
    state = Path(os.environ.get("HPCDIST_SLURM_STATE") or f"/tmp/hpcdist-slurm-{os.getpid()}")
    up = _cluster_script("up", state)
    if up.returncode != 0:
        down = _cluster_script("down", state)
        pytest.fail(
            f"slurm_cluster.sh up {state} failed (exit {up.returncode}):\n{up.stderr}{down.stderr}", pytrace=False
        )
    yield Cluster(state, venv)
    if os.environ.get("HPCDIST_SLURM_KEEP") == "1":
        print(f"\nHPCDIST_SLURM_KEEP=1: cluster left up; stop it with: bash {SCRIPT} down {state}")
        return
    down = _cluster_script("down", state)
    assert down.returncode == 0, f"slurm_cluster.sh down {state} failed:\n{down.stderr}"


@pytest.fixture
def cluster(slurm_cluster: Cluster) -> Cluster:
    """The session's cluster, for tests that run clients themselves."""
    return slurm_cluster


@pytest.fixture
def venv(slurm_cluster: Cluster) -> Path:
    """The venv the jobs run hpcdist from."""
    return slurm_cluster.venv


@pytest.fixture
def submit(slurm_cluster: Cluster, tmp_path: Path) -> Callable[..., JobResult]:
    """submit(script_text, timeout=120, *sbatch_options) -> JobResult; the job runs in this test's tmp_path."""

    def _submit(script_text: str, timeout: float = 120, *options: str) -> JobResult:
        return slurm_cluster.submit(script_text, timeout, tmp_path, *options)

    return _submit


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How long bringing the cluster up and down and each job took."""
    if _timings:
        terminalreporter.write_sep("-", "slurm test cluster timings")
        for what, seconds in _timings:
            terminalreporter.write_line(f"{what:<20} {seconds:6.1f} s")
