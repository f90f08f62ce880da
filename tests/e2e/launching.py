"""End-to-end launches: real mpirun, argv lists, a timeout on every run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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
    """Run argv from the repository root with extra environment; a hang fails the test after `timeout`."""
    full_env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **env}
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def mpi_overlay(dest: Path, wheel: str = "mpich") -> Path:
    """A virtual environment at `dest` with an MPI `wheel` (mpich, impi-rt) over this one's packages; its python.

    One mpi4py serves every MPI: it loads the libmpi of `sys.exec_prefix/lib` first (mpi4py/_mpiabi.py), so this
    venv's python loads that wheel's MPI and this one's Open MPI. $HPCDIST_MPICH_VENV names a ready MPICH one.
    """
    ready = os.environ.get("HPCDIST_MPICH_VENV") if wheel == "mpich" else None
    if ready:
        return Path(ready) / "bin" / "python"
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
