"""MPI as the failure detector for gloo and nccl groups: a thread with a receive from any rank of the world pending.

ULFM completes that receive with an error as soon as any rank of the world fails. The thread then notes the lost
ranks (`lost`), revokes the world (every survivor's next `commit` raises at once) and cuts this process's gloo
connections (`release_gloo`): a gloo call waiting on a peer cannot be aborted otherwise, and waits for its timeout.
The mpi backend needs none: its own calls return ULFM's errors.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import torch.distributed as dist
from mpi4py import MPI

from ..abort import before_finalize
from ..mpi_backend import BACKEND_NAME
from ..mpi_backend.lost import failed_starts, is_failure
from ..runtime import bootstrap, sockets
from . import ulfm

__all__ = ["lost", "release_gloo", "start", "stop"]

_TAG = 0x4654  # no rank ever sends on it: the receive only ends by a failure or a revoke
_POLL = 0.02  # seconds between the thread's tests of the receive (a blocking wait would spin a core)
_state: dict[
    str, Any
] = {}  # "thread", "comm", "stopping"; "lost": start ranks seen failing; "hooked": stop at finalize


def start() -> None:
    """Watch the world for failures from a thread (once; collective: it duplicates the world), under shrink mode
    and for a default group of gloo or nccl."""
    if "thread" in _state or not ulfm.shrink_mode() or not dist.is_initialized():
        return
    if str(dist.get_backend()) == BACKEND_NAME:
        return
    _state.pop("lost", None)
    comm = _state["comm"] = ulfm.world().Dup()
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    stopping = _state["stopping"] = threading.Event()
    thread = _state["thread"] = threading.Thread(
        target=_watch, args=(comm, stopping), name="hpcdist-failure-detector", daemon=True
    )
    thread.start()
    if not _state.get("hooked"):
        _state["hooked"] = True
        before_finalize(stop)  # its Test() must not come after MPI_Finalize


def stop() -> None:
    """Stop the thread (local): its communicator is revoked, the receive ends."""
    stopping = _state.pop("stopping", None)
    if stopping is not None:
        stopping.set()
    thread = _state.pop("thread", None)
    if thread is not None:
        thread.join(1.0)
    comm = _state.pop("comm", None)
    if comm is not None:
        with contextlib.suppress(MPI.Exception):
            comm.Revoke()


def lost() -> list[int]:
    """The start ranks the thread saw failing since the last recovery."""
    return list(_state.get("lost", ()))


def _watch(comm: MPI.Intracomm, stopping: threading.Event) -> None:
    """Wait for a failure; note who failed and revoke the world so that every survivor learns of it."""
    request = comm.Irecv([bytearray(1), MPI.BYTE], MPI.ANY_SOURCE, _TAG)
    while not stopping.wait(_POLL):
        try:
            request.Test()
        except MPI.Exception as exc:
            if not is_failure(exc) or stopping.is_set():
                return
            _state["lost"] = failed_starts(comm)
            with contextlib.suppress(MPI.Exception):
                ulfm.world().Revoke()
            release_gloo()
            return


def release_gloo() -> None:
    """Make every gloo call that waits on a peer return with an error: cut the connections this process's gloo
    listeners accepted (runtime/sockets.py); each peer cuts its own, so every pair is cut from one side."""
    sockets.cut_accepted(sockets.listening() - bootstrap.listening_before_init())
