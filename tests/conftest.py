"""Suite-wide rule: under CI=true a skipped test is a failure, never a pass; and the MPICH / Intel MPI venvs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from mpi_venv import MPICH_LOCK, overlay

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


def _overlay_or_skip(factory: pytest.TempPathFactory, install: tuple[str, ...], ready: str) -> Path:
    """$`ready`/bin/python when that names a venv (`make env` makes .venv-mpich), else a fresh overlay with the wheel
    `pip install *install` gets (tests/mpi_venv.py); a skip if pip cannot get it."""
    if os.environ.get(ready):
        python = Path(os.environ[ready]) / "bin" / "python"
        if not python.exists():
            pytest.fail(f"${ready}={os.environ[ready]} has no bin/python: run `make env`, or unset {ready}")
        return python
    try:
        return overlay(factory.mktemp("mpi") / "venv", *install)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot make a venv with {' '.join(install)} ({exc}); set {ready} to one")


@pytest.fixture(scope="session")
def mpich_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of an MPICH venv: $HPCDIST_MPICH_VENV, else this venv's packages with the mpich wheel over them."""
    return _overlay_or_skip(tmp_path_factory, ("-r", str(MPICH_LOCK)), "HPCDIST_MPICH_VENV")


@pytest.fixture(scope="session")
def impi_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of an Intel MPI venv: $HPCDIST_IMPI_VENV, else this venv's packages with the impi-rt wheel."""
    return _overlay_or_skip(tmp_path_factory, ("impi-rt",), "HPCDIST_IMPI_VENV")
