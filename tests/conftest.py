"""Suite-wide rule: under CI=true a skipped test is a failure, never a pass; and the MPICH / Intel MPI venvs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def _mpi_overlay(dest: Path, wheel: str) -> Path:
    """A virtual environment at `dest` with an MPI `wheel` (mpich, impi-rt) over this one's packages; its python.

    One mpi4py serves every MPI: it loads the libmpi of `sys.exec_prefix/lib` first (mpi4py/_mpiabi.py), so that
    venv's python loads the wheel's MPI and this one's Open MPI, with the same torch, mpi4py and hpcdist.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    python = dest / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", purelib], capture_output=True, text=True, check=True, timeout=60)
    ours = subprocess.run([sys.executable, "-c", purelib], capture_output=True, text=True, check=True, timeout=60)
    base = f"import site; site.addsitedir({ours.stdout.strip()!r})\n"  # .pth files there are read too
    Path(site.stdout.strip(), "_hpcdist_base.pth").write_text(base)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", wheel],
                   capture_output=True, check=True, timeout=600)
    return python


def _overlay_or_skip(factory: pytest.TempPathFactory, wheel: str, ready: str) -> Path:
    """$`ready`/bin/python when that names a venv, else a fresh overlay with `wheel`; a skip if pip cannot get it."""
    if os.environ.get(ready):
        return Path(os.environ[ready]) / "bin" / "python"
    try:
        return _mpi_overlay(factory.mktemp("mpi") / "venv", wheel)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot make a venv with {wheel} ({exc}); set {ready} to one")


@pytest.fixture(scope="session")
def mpich_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of an MPICH venv: $HPCDIST_MPICH_VENV, else this venv's packages with the mpich wheel over them."""
    return _overlay_or_skip(tmp_path_factory, "mpich>=4.2", "HPCDIST_MPICH_VENV")


@pytest.fixture(scope="session")
def impi_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of an Intel MPI venv: $HPCDIST_IMPI_VENV, else this venv's packages with the impi-rt wheel."""
    return _overlay_or_skip(tmp_path_factory, "impi-rt", "HPCDIST_IMPI_VENV")
