"""MPI as the failure detector for gloo and nccl groups: a thread with a receive from any rank of the world pending.

ULFM completes that receive with an error as soon as any rank of the world fails. The thread then notes the lost
ranks (`lost`), revokes the world (every survivor's next `commit` raises at once) and cuts this process's gloo
connections (`release_gloo`): a gloo call waiting on a peer cannot be aborted otherwise, and waits for its timeout.
The mpi backend's own calls return ULFM's errors: under an mpi default group the thread runs only once some rank
made a gloo group, whose call may wait on a survivor that left for the recovery.
"""

from __future__ import annotations

import contextlib
import threading

import torch.distributed as dist
from mpi4py import MPI

from ..abort import agreeing, before_finalize
from ..mpi_backend import BACKEND_NAME
from ..mpi_backend.lost import failed_starts, is_failure
from ..records import field, record
from ..runtime import sockets
from ..runtime.process import RankProcess
from . import ulfm

__all__ = ["gloo_here", "lost", "release_gloo", "start", "stop", "watches_gloo"]

_TAG = 0x4654  # no rank ever sends on it: the receive only ends by a failure or a revoke
_POLL = 0.02  # seconds between the thread's tests of the receive (a blocking wait would spin a core)


@record
class _Detector:
    """The detector's thread, its duplicate of the world, and the start ranks it saw failing since the last recovery.

    One per process (`_DETECTOR`): MPI_Finalize stops it from a callback, and its thread cuts this process's gloo
    connections, which belong to no group or call it could be handed.
    """

    process: RankProcess | None = None  # whose gloo listeners it leaves alone (those from before torch's groups)
    thread: threading.Thread | None = None
    comm: MPI.Intracomm | None = None
    stopping: threading.Event | None = None
    lost: list[int] = field(default_factory=list)
    hooked: bool = False  # MPI_Finalize stops it
    gloo: bool = False  # under an mpi default group: some rank made a gloo group (as the ranks last agreed)


_DETECTOR = _Detector()


def start(process: RankProcess, gloo: bool | None = None) -> None:
    """Watch the world for failures from a thread (once; collective: it duplicates the world), under shrink mode
    (`process`'s contract) and for a default group of gloo or nccl; for an mpi one, once some rank made a gloo
    group: `gloo` as every rank agreed it, or (None) as they last did."""
    if _DETECTOR.thread is not None or not process.contract.shrinks or not dist.is_initialized():
        return
    _DETECTOR.gloo = _DETECTOR.gloo if gloo is None else gloo
    if str(dist.get_backend()) == BACKEND_NAME and not _DETECTOR.gloo:
        return
    _DETECTOR.process, _DETECTOR.lost = process, []
    comm = _DETECTOR.comm = ulfm.world().Dup()
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    stopping = _DETECTOR.stopping = threading.Event()
    thread = _DETECTOR.thread = threading.Thread(
        target=_watch, args=(comm, stopping), name="hpcdist-failure-detector", daemon=True
    )
    thread.start()
    if not _DETECTOR.hooked:
        _DETECTOR.hooked = True
        before_finalize(stop)  # its Test() must not come after MPI_Finalize


def stop() -> None:
    """Stop the thread (local): its communicator is revoked, the receive ends."""
    stopping, thread, comm = _DETECTOR.stopping, _DETECTOR.thread, _DETECTOR.comm
    _DETECTOR.stopping = _DETECTOR.thread = _DETECTOR.comm = None
    if stopping is not None:
        stopping.set()
    if thread is not None:
        thread.join(1.0)
    if comm is not None:
        with contextlib.suppress(MPI.Exception):
            comm.Revoke()


def gloo_here() -> bool:
    """Whether this rank is in a gloo group (a rank outside a group does not know of it: the ranks agree on it)."""
    return any(str(backend) == "gloo" for backend, _ in dist.distributed_c10d._world.pg_map.values())


def watches_gloo() -> bool:
    """Whether, under an mpi default group, the ranks agreed that some rank made a gloo group."""
    return _DETECTOR.gloo


def lost() -> list[int]:
    """The start ranks the thread saw failing since the last recovery."""
    return list(_DETECTOR.lost)


def _watch(comm: MPI.Intracomm, stopping: threading.Event) -> None:
    """Wait for a failure; note who failed and revoke the world so that every survivor learns of it."""
    request = comm.Irecv([bytearray(1), MPI.BYTE], MPI.ANY_SOURCE, _TAG)
    while not stopping.wait(_POLL):
        try:
            with agreeing():
                request.Test()
        except MPI.Exception as exc:
            if not is_failure(exc) or stopping.is_set():
                return
            _DETECTOR.lost = failed_starts(comm)
            with contextlib.suppress(MPI.Exception):
                ulfm.world().Revoke()
            if _DETECTOR.process is not None:
                release_gloo(_DETECTOR.process)
            return


def release_gloo(process: RankProcess) -> None:
    """Make every gloo call that waits on a peer return with an error: cut the connections this process's gloo
    listeners accepted (runtime/sockets.py); each peer cuts its own, so every pair is cut from one side."""
    sockets.cut_accepted(sockets.listening() - process.listening)
