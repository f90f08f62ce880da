"""The revocable communicator torch's groups run on under --on-failure shrink (ULFM), and who its ranks were at start.

It is the mpi backend's parent communicator: at the start a Dup of COMM_WORLD (errors returned), made collectively
by `hpcdist.init`; each recovery replaces it with the survivors' shrunk communicator (`replace`). Ranks are named
in errors as at the job's start (COMM_WORLD's ranks): `start_rank` maps a current rank back.
"""

from __future__ import annotations

import array
import os

from mpi4py import MPI

from .. import mpi_backend
from ..abort import agreeing
from ..waits import Backoff, poll_until

__all__ = ["agree", "replace", "start_rank", "starts", "unavailable", "world"]

_FT_ENABLE = "OMPI_MCA_" + "mpi_ft_enable"  # what `mpirun --with-ft ulfm` sets in every rank (Open MPI 5)


def unavailable() -> str | None:
    """Why ULFM cannot run in this process (not Open MPI, not started with --with-ft ulfm, an old mpi4py), or None."""
    library = MPI.Get_library_version().splitlines()[0].strip()
    if "Open MPI" not in library:
        return f"ULFM (MPI's fault tolerance) needs Open MPI 5 here, and this process runs {library}"
    if not all(hasattr(MPI.Comm, name) for name in ("Revoke", "Shrink", "Agree", "Get_failed", "Ack_failed")):
        return "this mpi4py lacks Comm.Revoke/Shrink/Agree/Get_failed/Ack_failed: install mpi4py 4 or later"
    if os.environ.get(_FT_ENABLE, "").lower() not in ("1", "true", "yes", "enabled"):
        return "Open MPI was not started with its fault tolerance: run under `mpirun --with-ft ulfm`"
    return None


def world() -> MPI.Intracomm:
    """The current revocable communicator (errors returned) that torch's groups run on: at the start a Dup of
    COMM_WORLD (collective on its first call; hpcdist.init makes it under shrink mode), then the survivors'."""
    return mpi_backend.parent()


def agree(comm: MPI.Intracomm, value: int) -> int:
    """MPI_Comm_agree over `comm`: the bitwise AND of every live rank's `value`. Started and tested under
    `agreeing`, so the rank's own MPI threads call MPI between its tests, never during one. Like MPI_Comm_agree it
    waits for every live rank of `comm`, with no deadline: a hang in it is the watchdog's to report.

    Raises:
        MPI.Exception: a rank of `comm` failed, or `comm` was revoked.
    """
    flag = array.array("i", [value])  # read by MPI until the agreement completes
    with agreeing():
        request = comm.Iagree(flag)

    def done() -> bool:
        with agreeing():
            return bool(request.Test())

    poll_until(done, None, lambda: "unreachable: no deadline", backoff=Backoff(1e-5, 1e-3, spin=1e-4))
    return int(flag[0])


def starts(comm: MPI.Comm) -> list[int]:
    """The start rank (COMM_WORLD's) of each rank of `comm`."""
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return list(MPI.Group.Translate_ranks(group, list(range(group.size)), world))
    finally:
        group.Free()
        world.Free()


def start_rank(rank: int) -> int:
    """The rank at the job's start (COMM_WORLD's) of the process that is `rank` in the current world."""
    group, start = world().Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return int(MPI.Group.Translate_ranks(group, [rank], start)[0])
    finally:
        group.Free()
        start.Free()


def replace(comm: MPI.Intracomm) -> None:
    """Make `comm` (the survivors, errors returned) the world: the next groups are made on it."""
    mpi_backend.set_parent(comm)
