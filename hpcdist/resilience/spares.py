"""Spare ranks (`hpcdist mpirun --on-failure shrink --spares N`): the last N ranks wait idle, outside torch's world,
and take lost ranks' places, so that a recovery brings the world back to its size.

    stand_by()   collective over every rank, once (hpcdist.Survivors' constructor): torch's default group is made
                 anew over the first ranks (the actives); each spare waits on an MPI receive that a recovery's
                 revoke ends, polled with a backoff up to `_NAP` s (no core spun), until it joins or is released
    whole()      the communicator of actives and spares, which a recovery revokes and shrinks (membership.recover)
    split()      after the shrink: the first ranks (as many as trained before, if there are) are the actives
    joined()     the start ranks of the spares that joined in the last recovery: the survivors send them the state
    release()    at shutdown, rank 0 tells the spares left that the job is done: they end with status 0

The actives always come first in the whole communicator: it starts so, a shrink keeps the order, and the joining
spares are the first after the survivors, so a spare that joins never becomes rank 0 while a trained rank survives.
"""

from __future__ import annotations

import array
import contextlib
import os
import sys
from datetime import timedelta

import torch.distributed as dist
from mpi4py import MPI

from ..records import field, record
from ..runtime.mpistore import MPIStore
from ..runtime.prepare import job_timeout
from ..runtime.process import RankProcess
from ..waits import Backoff, poll_until
from . import detector, ulfm

__all__ = ["backend", "joined", "joining", "release", "revoke", "split", "stand_by", "wait_again", "whole"]

_TAG = 7077  # the release's message on the whole communicator
_NAP = 0.05  # the longest sleep between two tests of a spare's receive


@record
class _Spares:
    """This process's view of the actives and the spares (one per process, `_SPARES`)."""

    whole: MPI.Intracomm | None = None  # actives then spares, errors returned (None: no spares in this job)
    size: int = 0  # how many ranks train: the world's size to return to
    actives: list[int] = field(default_factory=list)  # the actives' start ranks, in order
    joined: list[int] = field(default_factory=list)  # the spares that joined in the last split
    backend: str = ""  # torch's default group's backend, for a spare's first group


_SPARES = _Spares()


def whole() -> MPI.Intracomm | None:
    """The communicator of actives and spares, or None when the job has no spares."""
    return _SPARES.whole


def joined() -> list[int]:
    """The start ranks of the spares that joined the actives in the last recovery (none: nothing to send)."""
    return list(_SPARES.joined)


def joining() -> bool:
    """Whether this rank is a spare that joined the actives in the last recovery."""
    return MPI.COMM_WORLD.rank in _SPARES.joined


def stand_by(process: RankProcess) -> bool:
    """Make torch's default group over the first np - N ranks; on a spare, wait until it joins them (True) or the job
    ends (then SystemExit with status 0). Collective over every rank, once; False on an active or without spares.
    """
    count = process.contract.spares
    if not count or _SPARES.whole is not None:
        return False
    comm = ulfm.world()
    _SPARES.whole, _SPARES.size = comm, comm.size - count
    _SPARES.actives = ulfm.starts(comm)[: _SPARES.size]
    _SPARES.backend = str(dist.get_backend())
    detector.stop()
    dist.destroy_process_group()
    store, process.mpi_store = process.mpi_store, None
    if store is not None:
        store.close()  # collective over every rank, while they all still serve it
    seconds = job_timeout(os.environ)
    actives = _first(comm, _SPARES.size)
    if actives is None:
        _wait(comm)
        return True
    ulfm.replace(actives)
    _start(process, actives, seconds)
    return False


def split(shrunk: MPI.Intracomm) -> MPI.Intracomm | None:
    """After `shrunk` = whole.Shrink(), which becomes the whole: the actives' communicator (its first ranks, as many
    as trained at the start if there are), or None on a spare that stays one. Collective over `shrunk`."""
    starts = ulfm.starts(shrunk)
    size = min(_SPARES.size, shrunk.size)
    _SPARES.whole = shrunk
    _SPARES.joined = [rank for rank in starts[:size] if rank not in _SPARES.actives]
    _SPARES.actives = starts[:size]
    return _first(shrunk, size)


def backend() -> str:
    """torch's default group's backend, as the actives run it (a spare has none of its own)."""
    return _SPARES.backend


def revoke() -> None:
    """Revoke the whole communicator, so that the spares wake and join the recovery."""
    if _SPARES.whole is not None:
        with contextlib.suppress(MPI.Exception):
            _SPARES.whole.Revoke()


def release() -> None:
    """On the actives' rank 0 at shutdown: tell every spare left that the job is done (they exit with status 0)."""
    comm = _SPARES.whole
    if comm is None or comm.rank != 0:
        return
    done = array.array("i", [1])
    for rank in range(len(_SPARES.actives), comm.size):
        with contextlib.suppress(MPI.Exception):  # a spare lost meanwhile is told nothing
            comm.Send(done, dest=rank, tag=_TAG)


def wait_again(shrunk: MPI.Intracomm) -> None:
    """On a spare that stayed one in a recovery: wait again, on `shrunk`, the whole that `split` was given."""
    _wait(shrunk)


def _wait(comm: MPI.Intracomm) -> None:
    """Wait on `comm` until a recovery revokes it (return) or rank 0 releases this spare (SystemExit, status 0)."""
    box = array.array("i", [0])
    request = comm.Irecv(box, source=0, tag=_TAG)

    def woken() -> bool:
        try:
            return bool(request.Test())
        except MPI.Exception:  # revoked, or a rank failed: the recovery goes on in membership.recover
            return True

    poll_until(woken, None, lambda: "unreachable: no deadline", backoff=Backoff(1e-4, _NAP))
    if box[0]:
        raise SystemExit(0)


def _first(comm: MPI.Intracomm, size: int) -> MPI.Intracomm | None:
    """The communicator of `comm`'s first `size` ranks (errors returned) on them, None on the others (collective)."""
    part: MPI.Intracomm = comm.Split(0 if comm.rank < size else 1, comm.rank)  # type: ignore[assignment]
    part.Set_errhandler(MPI.ERRORS_RETURN)
    if comm.rank < size:
        return part
    part.Free()
    return None


def _start(process: RankProcess, comm: MPI.Intracomm, seconds: float) -> None:
    """torch's default group over `comm`'s ranks, on a new store over MPI, as a recovery makes it."""
    store = process.mpi_store = MPIStore(comm, seconds)  # the one shutdown closes
    init = getattr(dist.init_process_group, "_hpcdist_original", dist.init_process_group)
    init(_SPARES.backend, store=store, rank=comm.rank, world_size=comm.size, timeout=timedelta(seconds=seconds))
    watchdog = sys.modules.get("hpcdist.forensics.watchdog")  # loaded where hang forensics run
    if watchdog is not None:
        watchdog.rebase(comm)
