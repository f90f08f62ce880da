"""The torch suite tier needs hpcdist's pytest plugin (its deadline ends a hung test) and prints its own report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

REPORT = pytest.StashKey[str]()  # the tier's summary, printed by rank 0 at the end of the session
SESSION = "hpcdist-mpi-session"  # the plugin's per-process state: outcome agreement and the deadline thread


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """The plugin must be active: the tier runs under mpiexec with --with-mpi, never without a deadline."""
    if not config.pluginmanager.has_plugin(SESSION):
        raise pytest.UsageError(
            "tests/torchsuite runs under MPI with hpcdist's pytest plugin: run it as `BACKEND=mpi mpiexec -n 3 "
            "python -m pytest --with-mpi tests/torchsuite` (reinstall with `pip install -e .` if the plugin is "
            "missing)"
        )


def _session(config: pytest.Config) -> Any:
    """The plugin's per-process state (pytest_configure made sure the plugin is active)."""
    session = config.pluginmanager.get_plugin(SESSION)
    assert session is not None
    return session


@pytest.fixture
def deadline(request: pytest.FixtureRequest) -> Any:
    """The plugin's deadline thread, which the tier re-arms for each of torch's tests."""
    return _session(request.config).deadline_thread


@pytest.fixture
def tier_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Hand the tier's report to the terminal summary."""

    def keep(text: str) -> None:
        request.config.stash[REPORT] = text

    return keep


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Rank 0 prints the tier's report: counts, failures, and torch's own skips by reason."""
    report = config.stash.get(REPORT, None)
    if report is not None and _session(config).rank == 0:
        terminalreporter.write_sep("=", "torch's distributed test suite")
        terminalreporter.write_line(report)
