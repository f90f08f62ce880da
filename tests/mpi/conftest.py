"""The MPI suite runs under hpcdist's pytest plugin (hpcdist/pytest_plugin.py): ranks agree on every
outcome and a hung test ends the job with every rank's stack. Refuse to run without it, so a stale
install (no `pytest11` entry point) cannot quietly bring back hangs and rank-divergent results.

A test that needs a world of some size is marked `world_size(min=N)` (or `max=N`): at another size it is not
collected (deselected, and listed at the end of the run), so it can neither pass without running nor be a skip.
`make test-mpi` runs the tier at 4 ranks and at 1 (RUN_AT); a marker that admits neither is refused at collection,
so each test runs at one size at least.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

_OUT_OF_SIZE = pytest.StashKey[list[str]]()
RUN_AT = (1, 4)  # the world sizes `make test-mpi` runs this tier at (NP and 1)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the world_size marker; under --with-mpi, hpcdist's plugin must be loaded and active."""
    config.addinivalue_line(
        "markers", "world_size(min=1, max=None): collect the test only where the MPI world has that many ranks"
    )
    if not config.getoption("--with-mpi", default=False) or config.getoption("no_mpi_agree", default=False):
        return
    if not config.pluginmanager.has_plugin("hpcdist-mpi-session"):
        raise pytest.UsageError(
            "hpcdist's pytest plugin is not active: reinstall with `pip install -e .` so setup.cfg's "
            "pytest11 entry point (hpcdist = hpcdist.pytest_plugin) is registered"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under --with-mpi, leave out the tests whose world_size marker excludes this world's size."""
    if not config.getoption("--with-mpi", default=False):
        return  # pytest-mpi skips the MPI tests then (a failure under CI=true)
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("world_size")
        low, high = (marker.kwargs.get("min", 1), marker.kwargs.get("max", None)) if marker else (1, None)
        if not any(low <= n <= (high or n) for n in RUN_AT):
            raise pytest.UsageError(f"{item.nodeid}: its world_size marker admits none of {RUN_AT}: it would never run")
        (kept if low <= size <= (high or size) else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    config.stash[_OUT_OF_SIZE] = [f"{item.nodeid} (world size {size})" for item in left]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Name the tests left out for the world's size: they run at another size of `make test-mpi`."""
    left = config.stash.get(_OUT_OF_SIZE, [])
    if left:
        terminalreporter.write_line(f"not collected at this world size ({len(left)}): " + ", ".join(left))


def _restore_environ() -> Iterator[None]:
    """hpcdist.init writes RANK, MASTER_PORT & co.; put os.environ back so a later init rendezvouses afresh."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


restore_environ_per_module = pytest.fixture(scope="module", autouse=True)(_restore_environ)
restore_environ_per_test = pytest.fixture(autouse=True)(_restore_environ)


# How MPI_Get_library_version begins -> the launcher hpcdist.runtime.env should detect when that MPI's own
# mpiexec started the run: Open MPI's sets OMPI_COMM_WORLD_*, Hydra (MPICH's and Intel MPI's) sets PMI_*.
_LAUNCHER_OF_LIBRARY = {"Open MPI": "openmpi", "MPICH": "mpich", "Intel(R) MPI": "mpich"}


@pytest.fixture(scope="session")
def expected_launcher() -> str:
    """The launcher name LaunchEnv must report in this run, told by the MPI library mpi4py loaded (`make test-mpi`
    runs this tier under Open MPI's mpiexec and under MPICH's); an MPI not in the table fails the test."""
    from mpi4py import MPI

    library = MPI.Get_library_version()
    for prefix, launcher in _LAUNCHER_OF_LIBRARY.items():
        if library.startswith(prefix):
            return launcher
    pytest.fail(f"MPI library {library[:60]!r} is none of {', '.join(_LAUNCHER_OF_LIBRARY)}: add it to the table")
