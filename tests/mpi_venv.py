"""An MPI venv over this one: `python tests/mpi_venv.py DEST PIP-ARGS` (make env), or overlay() from tests/conftest.py.

The venv at DEST has no packages of its own but the MPI wheel (mpich, impi-rt) that `pip install --no-deps PIP-ARGS`
installs (make env: `-r tests/requirements/mpich.lock`, the locked wheel by its hash); a .pth file adds the packages
of the venv whose python runs this (torch, mpi4py, hpcdist). One mpi4py serves every MPI: it loads the libmpi
of `sys.exec_prefix/lib` first (mpi4py/_mpiabi.py), so DEST's python loads the wheel's MPI and this venv's
python its Open MPI, with the same torch, mpi4py and hpcdist.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


MPICH_LOCK = Path(__file__).parent / "requirements" / "mpich.lock"


def overlay(dest: Path, *install: str) -> Path:
    """Make the venv at `dest` with the MPI wheel `pip install --no-deps *install` gets over this venv's packages;
    its python.

    Raises:
        subprocess.CalledProcessError: venv or pip failed (pip cannot reach the wheel, say).
        subprocess.TimeoutExpired: one of them took too long (venv 120 s, pip 600 s).
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    python = dest / "bin" / "python"
    site = subprocess.run([str(python), "-c", _PURELIB], capture_output=True, text=True, check=True, timeout=60)
    ours = subprocess.run([sys.executable, "-c", _PURELIB], capture_output=True, text=True, check=True, timeout=60)
    base = f"import site; site.addsitedir({ours.stdout.strip()!r})\n"  # .pth files there are read too
    Path(site.stdout.strip(), "_hpcdist_base.pth").write_text(base)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", *install],
                   check=True, timeout=600)  # fmt: skip
    return python


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python tests/mpi_venv.py DEST PIP-ARGS   (e.g. .venv-mpich -r tests/requirements/mpich.lock)")
    print(overlay(Path(sys.argv[1]), *sys.argv[2:]))
