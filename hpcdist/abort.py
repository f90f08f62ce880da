"""Ending the whole MPI job: the one MPI_Abort, and the excepthook that calls it on an uncaught exception."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from types import TracebackType

from . import control

__all__ = ["abort_job", "before_abort", "install_abort_hook"]

_BEFORE: list[Callable[[], None]] = []


def before_abort(hook: Callable[[], None]) -> None:
    """Have `abort_job` call `hook` before MPI_Abort: the shim's, to let its tagger write the rank's last lines."""
    if hook not in _BEFORE:
        _BEFORE.append(hook)


def abort_job(code: int) -> None:
    """End every rank of the MPI job now (MPI_Abort) if MPI is initialised; otherwise do nothing.

    mpi4py is never imported here: a process that has not loaded it has no MPI job to end.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    rank = mpi.COMM_WORLD.Get_rank()  # hpcdist mpirun learns how this rank ended (the first word about it wins)
    control.emit("failed", rank, f"called MPI_Abort host={socket.gethostname().split('.')[0]}")
    for hook in _BEFORE:
        hook()
    mpi.COMM_WORLD.Abort(code)


def install_abort_hook() -> None:
    """Make an uncaught exception abort the whole MPI job instead of hanging it in MPI_Finalize."""
    if getattr(sys.excepthook, "_hpcdist", False):
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        previous(kind, value, tb)
        abort_job(1)

    hook._hpcdist = True  # type: ignore[attr-defined]
    sys.excepthook = hook
