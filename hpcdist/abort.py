"""Ending the whole MPI job: the one MPI_Abort, and the excepthook that calls it on an uncaught exception; and
ending a rank's own MPI threads before MPI_Finalize (`before_finalize`), and keeping them out of MPI while the world
agrees (`agreeing`).

Under `hpcdist mpirun --on-failure shrink` (the contract's `shrinks`) a failing rank ends itself only
(`leave_rank`): the survivors see a process failure (Open MPI's ULFM) and carry on without it, and end without
MPI_Finalize, after every atexit hook, with their program's status (`survive_finalize`).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import stat
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import NoReturn

from .contract import RankContract
from .events import Done, Failed
from .hosts import this_host
from .records import field, record
from .status import ABORTED

__all__ = [
    "abort_job",
    "agreeing",
    "before_abort",
    "before_finalize",
    "declare",
    "end_failed_rank",
    "exit_status",
    "install_abort_hook",
    "leave_rank",
    "speak_under",
    "survive_finalize",
    "survived",
]

READ_SECONDS = 2.0  # how long a failing rank waits for its launcher to read its last output before MPI_Abort


@record
class _Ending:
    """How this process ends the job: the contract it tells its launcher under, and what must run before it ends.

    One per process (`_ENDING`): MPI_Abort ends every rank whoever calls it (an uncaught exception's hook, the hang
    watchdog's thread, the mpi backend's, a test's deadline), and none of those can be handed the contract.
    """

    contract: RankContract = field(default_factory=RankContract)
    hooks: list[Callable[[], None]] = field(default_factory=list)
    agreeing: threading.Lock = field(default_factory=threading.Lock)
    survived: bool = False  # a recovery ran: the process ends without MPI_Finalize (`survive_finalize`)
    status: int = 0  # the status it then ends with: its program's (sys.exit's), 1 after an uncaught exception


_ENDING = _Ending()


def speak_under(contract: RankContract) -> None:
    """Have this process's ending tell the launcher of `contract` how the rank ended (the shim's, or init's)."""
    _ENDING.contract = contract


def before_abort(hook: Callable[[], None]) -> None:
    """Have `abort_job` call `hook` before MPI_Abort: the shim's, to let its tagger write the rank's last lines."""
    if hook not in _ENDING.hooks:
        _ENDING.hooks.append(hook)


def agreeing() -> threading.Lock:
    """Held around each start and test of the world's agreement (MPI_Comm_iagree) and by the rank's own MPI threads
    (the hang watchdog, the failure detector) around their MPI calls: with Open MPI 5.0's agreement, another thread's
    MPI call during a blocking MPI_Comm_agree now and then left one rank alone with a garbage result, and the ranks'
    steps then parted ways."""
    return _ENDING.agreeing


def before_finalize(stop: Callable[[], None]) -> None:
    """Have MPI_Finalize call `stop` first, whoever calls it (the program itself, or mpi4py at exit): a thread that
    makes MPI calls stops there, before any call of its could come after MPI_Finalize (which aborts the rank).

    MPI_Finalize deletes COMM_SELF's attributes before anything else; `stop` is the delete callback of one.
    """
    mpi = sys.modules["mpi4py.MPI"]  # loaded by the caller, whose thread makes MPI calls (a leaf imports no mpi4py)
    keyval = mpi.Comm.Create_keyval(delete_fn=lambda *_: stop())
    mpi.COMM_SELF.Set_attr(keyval, True)


def survive_finalize() -> None:
    """After survivors recovered from a failure, end this process without MPI_Finalize: Open MPI 5.0's survivors of a
    failure hang in it at random (2 runs in 6 with two ranks lost; open-mpi/ompi#11404), and it waits for every other
    survivor, so that one survivor cannot finalize alone (measured: one that did waited for a peer that skipped it).

    Every atexit hook still runs, those registered before the recovery too: `_end`, registered as this module is
    imported (first, so it runs last), then tells the launcher the program's status (`sys.exit`'s, 1 after an uncaught
    exception) and exits with it; under hpcdist mpirun the status is told (a `Done` event), and the process exits 0,
    since Open MPI ends the other survivors when one exits non-zero without MPI_Finalize (measured, 5.0.11). (A hook
    registered before hpcdist was imported, which only a program run without hpcdist's runner can have, is skipped.)
    """
    if _ENDING.survived:
        return
    previous_hook, previous_exit = sys.excepthook, sys.exit

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        _ENDING.status = 1
        previous_hook(kind, value, tb)

    def exit_told(status: str | int | None = None) -> NoReturn:  # sys.exit, its status kept: not seen at exit
        declare(exit_status(status))
        previous_exit(status)

    sys.excepthook, sys.exit = hook, exit_told
    _ENDING.survived = True


def declare(status: int) -> None:
    """The status this process's program ended with (the runner's, or sys.exit's), for a survivor's `_end`."""
    _ENDING.status = status


def survived() -> bool:
    """Whether this process survived a failure (`survive_finalize` ran): it ends as `_end` says."""
    return _ENDING.survived


def exit_status(code: object) -> int:
    """The status `sys.exit(code)` leaves to the OS: None 0, an int its low byte (-1 is 255), anything else 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def _end() -> None:
    """At exit, after every other atexit hook (registered first): a survivor tells its status and leaves without
    MPI_Finalize (`survive_finalize`); any other process goes on to its normal end."""
    if not _ENDING.survived:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    status, contract = _ENDING.status, _ENDING.contract
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        contract.tell(Done(mpi.COMM_WORLD.Get_rank(), status=status))
    os._exit(0 if contract.routed else status)


atexit.register(_end)


def abort_job(code: int) -> None:
    """End every rank of the MPI job now (MPI_Abort) if MPI is initialised; otherwise only let the launcher read
    this rank's last lines first (the rank then exits on its own, and the launcher ends the job).

    mpi4py is never imported here: a process that has not loaded it has no MPI job to end.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        wait_until_read((1, 2))  # PRRTE, ending the job for a rank's exit, dropped output it had not read yet
        return
    rank = mpi.COMM_WORLD.Get_rank()  # hpcdist mpirun learns how this rank ended (the first word about it wins)
    _ENDING.contract.tell(Failed(rank, how=ABORTED, host=this_host().split(".")[0]))
    for hook in _ENDING.hooks:
        hook()
    wait_until_read((1, 2))
    mpi.COMM_WORLD.Abort(code)


def leave_rank(code: int) -> NoReturn:
    """End this rank only, now: its last lines go out first, then `_exit` without MPI_Finalize or MPI_Abort.

    Under Open MPI's ULFM the others then see a process failure in their next call and carry on without it; a rank
    that finalised instead would leave them waiting for its part of their collectives.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    for hook in _ENDING.hooks:
        hook()
    wait_until_read((1, 2))
    os._exit(code if 0 < code < 256 else 1)


def leave_after_peer(contract: RankContract, rank: int, why: str) -> NoReturn:
    """End this rank only, as a casualty: a peer was lost before the ranks could carry on without it (`why`, for a
    plain mpirun; hpcdist mpirun names it after the rank that failed first)."""
    host = this_host().split(".")[0]
    contract.tell(Failed(rank, how="exit code 1", host=host, after_peer=True, at=time.time()))
    if not contract.routed:
        print(f"hpcdist: rank {rank} on {host} left: {why}", file=sys.stderr)
    leave_rank(1)


def end_failed_rank(contract: RankContract, code: int) -> None:
    """A rank's program failed: end this rank only under --on-failure shrink (`leave_rank`), else the whole job."""
    if contract.shrinks:
        leave_rank(code)
    abort_job(code)


def wait_until_read(fds: tuple[int, ...], timeout: float = READ_SECONDS) -> None:
    """Wait (at most `timeout` s) until whoever reads these pipes (a launcher's proxy) has read all that is in them.

    A launcher handles its ranks' pipes and the MPI_Abort request in whatever order its poll loop finds them:
    measured with MPICH 5.0.2's Hydra on the two-node Slurm cluster, a raising rank's traceback and hpcdist's
    line naming it were lost in 2 jobs of 6 when MPI_Abort followed the write at once. FIONREAD on a pipe counts
    the bytes written but not yet read, from either end. Files, terminals and sockets are left alone.
    """
    pipes = [fd for fd in fds if _is_pipe(fd)]
    deadline = time.monotonic() + timeout
    while pipes and time.monotonic() < deadline:
        pipes = [fd for fd in pipes if _unread(fd) > 0]
        if pipes:
            time.sleep(0.005)
    if pipes:
        print(
            f"hpcdist: warning: the failing rank waited {timeout:g} s for its launcher to read its output "
            f"(fds {', '.join(map(str, pipes))}); ending the job anyway",
            file=sys.stderr,
            flush=True,
        )


def _is_pipe(fd: int) -> bool:
    """Whether `fd` is an open pipe or FIFO."""
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def _unread(fd: int) -> int:
    """The bytes in pipe `fd` that its reader has not read yet (0 when that cannot be told)."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return 0


def install_abort_hook(contract: RankContract) -> None:
    """Make an uncaught exception abort the whole MPI job instead of hanging it in MPI_Finalize (under
    --on-failure shrink, which `contract` says: end this rank only)."""
    speak_under(contract)
    if getattr(sys.excepthook, "_hpcdist", False):
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        previous(kind, value, tb)
        mpi = sys.modules.get("mpi4py.MPI")
        if contract.shrinks and mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            rank = mpi.COMM_WORLD.Get_rank()
            contract.tell(Failed(rank, how="exit code 1", host=this_host().split(".")[0]))
        end_failed_rank(contract, 1)

    hook._hpcdist = True  # type: ignore[attr-defined]
    sys.excepthook = hook
