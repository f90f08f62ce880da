"""The MPI suite runs under hpcdist's pytest plugin (hpcdist/pytest_plugin.py): ranks agree on every
outcome and a hung test ends the job with every rank's stack. Refuse to run without it, so a stale
install (no `pytest11` entry point) cannot quietly bring back hangs and rank-divergent results."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under --with-mpi, hpcdist's plugin must be loaded and active."""
    if not config.getoption("--with-mpi", default=False) or config.getoption("no_mpi_agree", default=False):
        return
    if not config.pluginmanager.has_plugin("hpcdist-mpi-session"):
        raise pytest.UsageError(
            "hpcdist's pytest plugin is not active: reinstall with `pip install -e .` so setup.cfg's "
            "pytest11 entry point (hpcdist = hpcdist.pytest_plugin) is registered"
        )


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
