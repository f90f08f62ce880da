"""pytest plugin for MPI suites that cannot deadlock: ranks agree on outcomes, stuck tests end the job.

Registered as the `hpcdist` pytest11 entry point. It is ACTIVE only when pytest runs under MPI, i.e.
with pytest-mpi's `--with-mpi`/`--only-mpi` or with `--mpi-agree` (`--no-mpi-agree` turns it off);
otherwise it only adds its options, its marker and its fixtures, and imports neither mpi4py nor torch.

When active, on every rank:
- after each test phase (setup, call, teardown) the ranks combine their outcomes with a non-blocking
  reduction (and an allgather of the outcomes only when they differ): a failure on any rank fails the
  test on every rank, naming the failing ranks and their reasons; a skip on some ranks but not others is a failure too;
- each test has a deadline (`--mpi-deadline SECONDS`, default 120, 0 = none;
  `@pytest.mark.mpi_deadline(seconds)` per test). At the deadline every rank's Python stack reaches
  rank 0, which prints them all, names the ranks that did not answer, and calls MPI_Abort
  (see hpcdist/testing/deadline.py). Stacks travel as files in a directory under $TMPDIR (ranks on one
  host, or TMPDIR on a shared filesystem) and as MPI messages on a duplicated communicator.

Fixtures (usable with or without MPI): `launch_env`, `mpi_comm`, `shared_tmp_path`, `rank_device`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .errors import WaitTimeout
from .waits import Backoff, poll_until

__all__ = ["launch_env", "mpi_comm", "rank_device", "shared_tmp_path"]

DEFAULT_DEADLINE = 120.0
_SESSION = "hpcdist-mpi-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    """--mpi-agree, --no-mpi-agree, --mpi-deadline."""
    group = parser.getgroup("hpcdist-mpi", "hpcdist: MPI outcome agreement and deadlines")
    group.addoption(
        "--mpi-agree",
        action="store_true",
        default=False,
        help="make ranks agree on every test outcome and enforce --mpi-deadline "
        "(implied by pytest-mpi's --with-mpi/--only-mpi)",
    )
    group.addoption(
        "--no-mpi-agree",
        action="store_true",
        default=False,
        help="turn hpcdist's MPI agreement and deadlines off even with --with-mpi",
    )
    group.addoption(
        "--mpi-deadline",
        type=float,
        default=DEFAULT_DEADLINE,
        metavar="SECONDS",
        help=f"seconds a test may take before every rank's stack is printed and the job is "
        f"aborted (default {DEFAULT_DEADLINE:g}; 0 = no deadline)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; start the MPI session machinery only when running under MPI."""
    config.addinivalue_line(
        "markers", "mpi_deadline(seconds): this test's deadline under MPI (overrides --mpi-deadline)"
    )
    if _active(config):
        config.pluginmanager.register(_MpiSession(config), _SESSION)


def _active(config: pytest.Config) -> bool:
    """--mpi-agree, or pytest-mpi's --with-mpi/--only-mpi, unless --no-mpi-agree."""
    if config.getoption("no_mpi_agree"):
        return False
    wants = config.getoption("mpi_agree") or any(
        config.getoption(name, default=False) for name in ("--with-mpi", "--only-mpi")
    )
    return bool(wants)


def _real_stderr(config: pytest.Config) -> int:
    """A duplicate of the terminal's stderr, bypassing pytest's capture (a deadline report must be seen)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        return os.dup(2)
    with capman.global_and_fixture_disabled():
        return os.dup(2)


class _MpiSession:
    """Per-process state when active: the agreement communicator and the deadline thread."""

    def __init__(self, config: pytest.Config) -> None:
        from mpi4py import MPI

        from .testing.deadline import DeadlineThread

        world = MPI.COMM_WORLD
        self.comm = world.Dup()  # agreement and fixtures: never mixed with the tests' own traffic
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.default_deadline = float(config.getoption("mpi_deadline") or 0)
        self.directory = self.comm.bcast(tempfile.mkdtemp(prefix="hpcdist-mpi-") if self.rank == 0 else None)
        threads_ok = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self.deadline_thread = DeadlineThread(
            self.rank, self.size, self.directory, world.Dup() if threads_ok else None, _real_stderr(config)
        )

    def deadline(self, item: pytest.Item) -> float:
        """The marker's deadline, else --mpi-deadline."""
        mark = item.get_closest_marker("mpi_deadline")
        if mark is None:
            return self.default_deadline
        seconds = mark.args[0] if mark.args else mark.kwargs.get("seconds")
        if not isinstance(seconds, (int, float)) or seconds < 0:
            raise pytest.UsageError(f"{item.nodeid}: mpi_deadline takes a number of seconds, got {seconds!r}")
        return float(seconds)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[Any]:
        seconds = self.deadline(item)
        if seconds > 0:
            self.deadline_thread.arm(seconds, item.nodeid)
        try:
            return (yield)
        finally:
            self.deadline_thread.disarm()
            self.deadline_thread.where = f"between tests (after {item.nodeid})"

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        self.deadline_thread.where = f"in {item.nodeid} (setup)"
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        self.deadline_thread.where = f"in {item.nodeid} (call)"
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        self.deadline_thread.where = f"in {item.nodeid} (teardown)"
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
        """Outermost wrapper: sees the final report (after xfail handling) and makes the ranks agree on it."""
        from .testing.agreement import agree, apply_verdict, combine, outcome_of

        report = yield
        self.deadline_thread.where = f"agreeing with the other ranks on {item.nodeid} ({call.when})"
        verdict = combine(agree(self.comm, outcome_of(report)))
        if verdict is not None:
            apply_verdict(report, verdict)
        self.deadline_thread.where = f"in {item.nodeid} (after {call.when})"
        return report

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Stop the deadline thread; rank 0 removes the stack directory once every rank is done (bounded wait)."""
        self.deadline_thread.close()
        request = self.comm.Ibarrier()
        with contextlib.suppress(WaitTimeout):  # a rank that never arrives must not keep this one from exiting
            poll_until(request.Test, time.monotonic() + 10, str, backoff=Backoff(0.01, 0.01))
        if self.rank == 0:
            shutil.rmtree(self.directory, ignore_errors=True)


def _session(config: pytest.Config) -> _MpiSession | None:
    return config.pluginmanager.get_plugin(_SESSION)


@pytest.fixture
def launch_env() -> Any:
    """This rank's hpcdist.LaunchEnv (launcher, rank, sizes, local rank)."""
    from .runtime.env import LaunchEnv

    return LaunchEnv.from_environ(os.environ)


@pytest.fixture
def mpi_comm() -> Iterator[Any]:
    """A duplicate of MPI.COMM_WORLD for this test alone, freed after it."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    yield comm
    comm.Free()


@pytest.fixture
def shared_tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for all ranks: rank 0 creates it and broadcasts the path.

    Assumes the ranks share a filesystem (one host, or pytest's --basetemp on a shared filesystem).
    """
    from mpi4py import MPI

    session = _session(request.config)
    comm = session.comm if session is not None else MPI.COMM_WORLD.Dup()
    try:
        name = re.sub(r"\W", "_", request.node.name)[:30]
        path = str(tmp_path_factory.mktemp(name)) if comm.Get_rank() == 0 else None
        return Path(comm.bcast(path, root=0))
    finally:
        if session is None:
            comm.Free()


@pytest.fixture
def rank_device(launch_env: Any) -> Any:
    """torch.device('cuda:LOCAL_RANK') when CUDA is available, else torch.device('cpu')."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if launch_env.local_rank >= count:
        pytest.fail(
            f"local rank {launch_env.local_rank} has no GPU: {launch_env.local_world_size} ranks on this "
            f"host but torch sees {count} GPU(s); start at most {count} ranks per host"
        )
    return torch.device("cuda", launch_env.local_rank)
