"""Every rank's Python stacks, printed grouped: on a hang (a part of the watchdog's answer), on SIGUSR2, on a failure.

`install` runs on every rank where the watchdog may run (the shim before the program, `hpcdist.init`): each
answer to the watchdog's gather then carries the rank's stacks, and SIGUSR2 has faulthandler dump every thread
into a pipe, from the signal handler itself, GIL or not. The watchdog thread reads that pipe each cycle and sends
the dump to rank 0 (under --on-failure shrink, the lowest rank alive), which waits a moment for the other ranks'
dumps (mpirun passes the signal to all), asks those that sent none (one rank was signalled), prints the report,
and the job goes on.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import os
import signal
import sys
import time
from typing import Any

from ..records import field, record
from . import hangreport, stacks, watchdog
from .recording import LEDGER

__all__ = ["SIGNAL", "install", "on_failure"]

SIGNAL = signal.SIGUSR2  # SIGUSR1 is the preemption notice (workloads.preemption)
_TAG = 7304  # a rank's signalled dump, sent to rank 0
_SETTLE = 1.0  # rank 0 waits this long after the first dump for the others' (mpirun passes the signal on to all)
_QUIET = 2.0  # dumps arriving this soon after a report belong to it (a rank asked before its own dump was read)
_PIPE_SIZE = 1 << 20  # faulthandler's dump of 100 threads of 100 frames fits; a fuller pipe truncates the dump


@record
class _Collector:
    """The pipe SIGUSR2's dump goes through, what of it was read, and on the reporter the dumps that arrived.

    One per process (`_COLLECTOR`): faulthandler's signal handler writes into its pipe.
    """

    pipe: int | None = None  # its reading end, once installed
    write: int | None = None  # its writing end, faulthandler's
    read: bytes = b""  # a dump read in part
    dumps: dict[int, dict[str, Any]] = field(default_factory=dict)  # on the reporter: rank -> its signalled dump
    first: float = 0.0  # when the first of them arrived (0: none yet)
    quiet_until: float = 0.0  # dumps before this (monotonic) time belong to the report just printed
    sent: list[Any] = field(default_factory=list)  # this rank's dumps on their way to the reporter
    failed: bool = False  # this rank's program failed and its report was printed


_COLLECTOR = _Collector()


def install() -> None:
    """Put this rank's stacks in its watchdog answers, and dump them on SIGUSR2 for the watchdog to send (once).

    SIGUSR2 is left to a handler the program installed before; one installed later replaces the dump.
    """
    if _COLLECTOR.pipe is not None:
        return
    hangreport.contribute("stacks", stacks.own)
    read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # the handler never blocks, even on the reading thread
    with contextlib.suppress(OSError):
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    if signal.getsignal(SIGNAL) == signal.SIG_DFL:  # a program's own SIGUSR2 handler (Slurm's --signal) stays
        faulthandler.register(SIGNAL, file=write, all_threads=True, chain=False)
    _COLLECTOR.pipe, _COLLECTOR.write = read, write
    watchdog.each_cycle(_cycle)


def on_failure(rank: int) -> None:
    """This rank's program failed on its own: print the other ranks' stacks, gathered as a hang report's are (each
    host's summary first, then full answers from a few ranks of each state: what this rank receives grows with the
    hosts and states, not the ranks), within the watchdog's answer windows.

    Nothing when no other rank still runs its program, or without a watchdog communicator (forensics off, or not
    under an MPI launch); only once.
    """
    if _COLLECTOR.pipe is None or _COLLECTOR.failed:
        return
    _COLLECTOR.failed = True
    surveyed = hangreport.survey()
    if surveyed is None:
        return
    answers, whole = surveyed
    answers.pop(rank, None)  # its traceback says where it is
    whole = [peer for peer in whole if peer != rank]
    found, finished = stacks.in_answers(answers)
    found = {peer: stack for peer, stack in found.items() if any(frames for _, frames in stack)}  # else in hpcdist's
    if not found:  # no other rank is still running its program (one failing too is in hpcdist's own frames)
        return
    from . import pyspy  # loaded by a failure's report alone, as by the other two reports

    missing = pyspy.fill(found, [peer for peer in range(_world_size()) if peer != rank and peer not in answers])
    headline = (
        f"hpcdist: rank {rank} failed; the other ranks' Python stacks (most recent call first; identical merged):"
    )
    said = hangreport.summarised(answers, whole)
    report = stacks.report(found, missing, headline, finished)
    print(report + (f"\n{said}" if said else ""), file=sys.stderr, flush=True)


def _world_size() -> int:
    """The size of COMM_WORLD."""
    from mpi4py import MPI

    return int(MPI.COMM_WORLD.Get_size())


def _cycle(comm: Any) -> None:
    """Watchdog thread: pass a complete SIGUSR2 dump on to the reporter (rank 0), which collects them and prints."""
    stack, reporter = _complete_dump(), hangreport.reporter(comm)
    if stack is not None:
        dump = {"phase": LEDGER.state(), "stacks": stack}  # as an answer is: a finished rank is named
        if comm.rank == reporter:
            _arrived(reporter, dump)
        else:
            _COLLECTOR.sent.append(comm.isend(dump, dest=reporter, tag=_TAG))  # kept until it completes
            _COLLECTOR.sent = [request for request in _COLLECTOR.sent if not request.Test()]
    if comm.rank != reporter:
        return
    from mpi4py import MPI

    status = MPI.Status()
    while (message := comm.improbe(source=MPI.ANY_SOURCE, tag=_TAG, status=status)) is not None:
        _arrived(status.Get_source(), message.recv())
    first = _COLLECTOR.first
    if first and (len(_COLLECTOR.dumps) == comm.size or time.monotonic() - first > _SETTLE):
        _print_signalled(comm.size)


def _complete_dump() -> stacks.Stacks | None:
    """The dump read from the pipe once a cycle brought nothing more (the handler writes it all at once)."""
    chunks = []
    pipe = _COLLECTOR.pipe
    with contextlib.suppress(BlockingIOError):
        while pipe is not None and (chunk := os.read(pipe, 1 << 16)):
            chunks.append(chunk)
    if chunks:
        _COLLECTOR.read += b"".join(chunks)
        return None
    if not _COLLECTOR.read:
        return None
    text, _COLLECTOR.read = _COLLECTOR.read.decode(errors="replace"), b""
    return stacks.parse(text, stacks.thread_names())


def _arrived(rank: int, dump: dict[str, Any]) -> None:
    """Rank 0: note a rank's signalled dump, unless it belongs to the report just printed."""
    now = time.monotonic()
    if now < _COLLECTOR.quiet_until:
        return
    _COLLECTOR.dumps[rank] = dump
    _COLLECTOR.first = _COLLECTOR.first or now


def _print_signalled(size: int) -> None:
    """Rank 0: ask the ranks that sent no dump for their stacks, print every rank's, and start afresh."""
    dumps = _COLLECTOR.dumps
    if len(dumps) < size:
        asked = hangreport.ask_all() or {}
        dumps.update({rank: answer for rank, answer in asked.items() if rank not in dumps})
    found, finished = stacks.in_answers(dumps)
    from . import pyspy

    missing = pyspy.fill(found, [rank for rank in range(size) if rank not in found and rank not in finished])
    headline = f"hpcdist: {SIGNAL.name}: every rank's Python stacks (most recent call first; identical stacks merged):"
    print(stacks.report(found, missing, headline, finished), file=sys.stderr, flush=True)
    _COLLECTOR.dumps, _COLLECTOR.first, _COLLECTOR.quiet_until = {}, 0.0, time.monotonic() + _QUIET
