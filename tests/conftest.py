"""Suite-wide rule: under CI=true a skipped test is a failure, never a pass."""

from __future__ import annotations

import os

import pytest

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember every skip, with its reason."""
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if CI=true and anything was skipped (e.g. MPI tests without --with-mpi)."""
    if os.environ.get("CI", "").lower() == "true" and _skipped:
        print("\nCI=true: skipped tests count as failures here:\n  " + "\n  ".join(_skipped))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
