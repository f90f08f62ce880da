"""Suite-wide rules: under CI=true a skipped test is a failure, never a pass; no killed mpirun's session directory is
left for the next test's; the MPICH / Intel MPI venvs; and the oldest and newest cloudpickle that hpcdist supports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_venv import MPICH_LOCK, overlay

from hpcdist.launching.sessions import clear_stale_sessions

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


@pytest.fixture(autouse=True)
def _no_stale_mpi_sessions() -> None:
    """No test's mpirun can be given the pid of a killed one whose session directory is still there."""
    clear_stale_sessions()


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


@pytest.fixture(scope="session", params=["3.0.0", "3.1.3"])
def cloudpickle_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(version, PYTHONPATH): the oldest and the newest supported cloudpickle, alone in a directory (pip --target)
    that, first on PYTHONPATH, shadows this venv's for a process and the ranks it starts; a skip if pip cannot get it.

    Not an overlay venv (tests/mpi_venv.py): its python would look for the MPI in its own prefix (mpi4py's
    _mpiabi.py), where Open MPI's wheel is not, and the compiled mpi backend would be built again for it.
    """
    version = request.param
    target = tmp_path_factory.mktemp(f"cloudpickle-{version}")
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--target",
        str(target),
        "--require-hashes",
        "-r",
        str(Path(__file__).parent / "requirements" / f"cloudpickle-{version}.lock"),
    ]
    try:
        subprocess.run(pip, check=True, capture_output=True, timeout=600)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot install cloudpickle=={version} ({exc})")
    return version, os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH", "")]))
