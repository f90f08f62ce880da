"""End-to-end launches: real mpirun, argv lists, a timeout on every run; waits on an event, never on a sleep."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from subprocess import PIPE
from typing import TypeVar

import pytest

from hpcdist import proctree

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Result:
    """A finished launch: status, output and how long it took."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


def launch(argv: list[str], timeout: float = 180, **env: str) -> Result:
    """Run argv from the repository root with extra environment; a hang fails the test after `timeout`, with the
    command, what it printed by then, and the stacks of its Python processes still running."""
    full_env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **env}
    start = time.monotonic()
    with subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=PIPE, stderr=PIPE, text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            below = proctree.descendants(proc.pid)
            stacks = python_stacks(below)
            for pid in [proc.pid, *below]:  # every one: a rank left would hold the pipes open
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            stdout, stderr = proc.communicate(timeout=30)
            pytest.fail(f"`{' '.join(argv)}` still ran after {timeout:g} s; it printed:\n{stdout}\n{stderr}\n{stacks}")
    return Result(proc.returncode, stdout, stderr, time.monotonic() - start)


def python_stacks(pids: list[int]) -> str:
    """The stacks py-spy reads of each Python process of `pids`, with its native frames: where a hung job waits."""
    dumps = []
    for child in pids:
        if Path(f"/proc/{child}/exe").resolve().name.startswith("python"):
            argv = [str(BIN / "py-spy"), "dump", "--native", "--pid", str(child)]
            _, out, err = proctree.capture(argv, timeout=30)
            dumps.append(f"process {child}:\n{out}{err}")
    return "\n".join(dumps)


def wait_for(what: str, ready: Callable[[], T | None], timeout: float = 120, job: subprocess.Popen | None = None) -> T:
    """Poll `ready()` until it gives a true value, and return that value. The test fails saying that it waited for
    `what` in vain: after `timeout` seconds, or as soon as `job` (the process that was to bring it) ended."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if job is not None and job.poll() is not None:
            out, err = job.communicate(timeout=60) if job.stdout or job.stderr else ("", "")
            pytest.fail(f"the job ended (status {job.returncode}) before {what}:\n{_text(out)}\n{_text(err)}")
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what}")
        time.sleep(0.02)  # between two looks at the event, not in place of it


def running(pid: int) -> bool:
    """Whether process `pid` runs: it exists and is no zombie (one that ended and waits to be reaped, as an orphan
    does for this pytest process, its subreaper: tests/e2e/conftest.py)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _text(output: str | bytes | None) -> str:
    """Captured output as text (TimeoutExpired keeps bytes)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def crowded(np: int) -> str:
    """The line hpcdist mpirun says first when `-np np` runs more ranks than this machine's CPUs ("" when not)."""
    cpus = len(os.sched_getaffinity(0))
    if np <= cpus:
        return ""
    return (
        f"hpcdist: -np {np} is more ranks than the {cpus} CPUs this process may run on, so they share them and each "
        "runs slower (--oversubscribe runs them here without this line)\n"
    )
