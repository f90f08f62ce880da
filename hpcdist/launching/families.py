"""Which MPI family a launcher on this machine belongs to, told by the files of its installation.

The families and what tells them apart are `hpcdist.families`' (pure); this module reads the file system for them:
where a launcher name leads on PATH (the World's lookup, handed in), its real path, and the files beside it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import families

__all__ = ["detect_family", "resolve_family"]


def detect_family(
    launcher: str,
    which: Callable[[str], str | None],
    listdir: Callable[[str], list[str]] = os.listdir,
) -> str | None:
    """The MPI of `launcher` (a path, or a name that `which` finds on PATH), told by its real name and the files
    beside it; None if not.

    Reads the file system only (`which`, `listdir`): running `launcher --version` here would start a process on every
    launch and every --dry-run (`hpcdist doctor` runs it).
    """
    found = which(launcher) if os.sep not in launcher else launcher
    if found is None:
        return None
    real = os.path.realpath(found)
    try:
        beside = listdir(os.path.dirname(real))
    except OSError:
        beside = []
    family = families.from_files(real, beside) or families.from_files(found, [])
    return family.name if family is not None else None


def resolve_family(
    launcher: str,
    mpi: str | None,
    where: str = "--mpi",
    *,
    which: Callable[[str], str | None],
    runnable: Callable[[str], bool] = lambda path: os.access(path, os.X_OK),
) -> tuple[str, str]:
    """(family name, launcher to run): `mpi` when given, else told by the launcher's installation, else Open MPI.

    The one choice of family for `hpcdist mpirun`, `hpcdist sbatch --launch mpirun` and `hpcdist.submit`; the family
    may run another program than the one named (Intel MPI's `mpirun` becomes the `mpiexec.hydra` beside it).

    Raises:
        UsageError: `mpi` is not an MPI hpcdist knows.
    """
    name = mpi if mpi is not None else detect_family(launcher, which) or families.DEFAULT
    family = families.lookup(name, where)
    return family.name, family.launcher(launcher, runnable)
