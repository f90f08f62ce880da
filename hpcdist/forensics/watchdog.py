"""Hang forensics' watchdog: a thread per rank that alarms the reporter when a call waits past its timeout.

Every rank runs a watchdog thread on its own duplicate of COMM_WORLD (`reserve`, `start`). When a rank's oldest
unfinished call (in the ledger, or below it in `sources`) is older than the job's timeout (or its init_process_group
older than the start-up timeout), it alarms rank 0, whose watchdog gathers every rank's answer and reports the hang
(`hangreport`); the threads answer even while their main threads are blocked in a call. Under --on-failure shrink a
failed rank is acknowledged and left out, and after a recovery the thread goes on over the survivors' communicator
(`rebase`). Under the shim, a rank whose program has ended keeps answering until every rank's program has
(`finish`), so the report can name it.
"""

from __future__ import annotations

import array
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..abort import agreeing, before_finalize, leave_after_peer
from ..contract import RankContract
from ..settingtable import STARTUP_TIMEOUT
from ..waits import wait_peers
from . import digest, frdump, gather, hung, sources
from .hangreport import WATCHDOG, acknowledge, contribute, link, own_answer, report_hang, reporter
from .ledger import FINISHED, INITIALISING
from .recording import LEDGER

__all__ = [
    "each_cycle",
    "finish",
    "rebase",
    "reserve",
    "start",
    "stop",
]

_ALARM = 7301
_POLL = 0.1
_FIRST = 1e-3  # once the program has ended: the pause between tests of the others' agreement for its first _QUICK s,
_QUICK = 0.2
_LATER = 0.01  # and after: a sleeping rank holds up each level of the agreement's tree by its pause
_FINALIZE_WAIT = 2.0  # seconds MPI_Finalize waits for the thread to stop (it is woken at once)


def each_cycle(work: Callable[[Any], None]) -> None:
    """Have the watchdog thread call `work(comm)` each cycle (every 0.1 s), after answering a request."""
    if work not in WATCHDOG.cycles:
        WATCHDOG.cycles.append(work)


def reserve(contract: RankContract, timeout: float, init_timeout: float) -> bool:
    """Duplicate COMM_WORLD for this rank's watchdog now (collective), so that `start` and `finish` are local.

    The shim calls this while every rank is in step, before the program runs; the timeouts are those a
    thread started by `finish` uses. False when MPI cannot host a watchdog thread.

    Raises:
        RendezvousTimeout: a rank did not come to the duplication within `init_timeout`.
    """
    from mpi4py import MPI

    WATCHDOG.contract = contract
    if WATCHDOG.comm is None:
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return False
        WATCHDOG.comm = _duplicate(MPI.COMM_WORLD, init_timeout, contract)
        before_finalize(lambda: stop(_FINALIZE_WAIT))  # the thread stops before the program's own MPI.Finalize()
    WATCHDOG.limits = (timeout, init_timeout)
    return True


def _duplicate(world: Any, timeout: float, contract: RankContract) -> Any:
    """`world`'s duplicate, its completion waited for in pauses: in a blocking MPI_Comm_dup the ranks that came first
    spin and take the cores of those still starting (measured: 1.6 s of 16 ranks' start-up, oversubscribed on 2
    cores).

    Under --on-failure shrink, a barrier's pauses, the duplicate made at once, then a barrier again: Open MPI 5.0.11's
    fault tolerance crashes a rank (SIGSEGV in ompi_comm_revoke_local) that is still making a communicator when a
    peer that made its own already leaves (measured 2026-12-01, 4 ranks, one leaving over a syntax error in the
    program: with Idup 3 jobs of 5, with Dup alone 2 of 12). A peer lost before the program starts leaves this rank
    too, as a casualty: the survivors carry on from the program on.

    Raises:
        RendezvousTimeout: it did not complete within `timeout` seconds; the message says who waited for what.
    """
    from mpi4py import MPI

    def wait(request: Any) -> None:
        what = "every rank to copy the world communicator for hang forensics during start-up"
        wait_peers(world, request, timeout, what, STARTUP_TIMEOUT.name)

    if not contract.shrinks:
        comm, request = world.Idup()
        wait(request)
        return comm
    try:
        wait(world.Ibarrier())
        comm = world.Dup()
        wait(world.Ibarrier())  # no rank goes on, and may leave, while another still makes it
        return comm
    except MPI.Exception as exc:
        leave_after_peer(contract, world.rank, f"a peer was lost during start-up ({exc})")


def start(contract: RankContract, timeout: float, init_timeout: float | None = None) -> bool:
    """Start this rank's watchdog thread, or give the running one these timeouts; True when this call started it.

    A call older than `timeout`, or a wait in init_process_group older than `init_timeout` (default:
    `timeout`), sets off the hang report. Collective over COMM_WORLD unless `reserve` ran; False if MPI
    cannot host the thread.
    """
    limits = (timeout, init_timeout or timeout)
    contribute(frdump.PART, frdump.local_part)
    if WATCHDOG.thread is not None:
        WATCHDOG.limits = limits
        return False
    if not reserve(contract, *limits):
        return False
    comm = WATCHDOG.comm  # its host's leader says which ranks it leads (torch's variables, which runtime.prepare set)
    gather.register(comm, digest.place(os.environ, comm.rank, comm.size), reporter(comm), link(comm))
    stopping = threading.Event()
    thread = threading.Thread(target=_watch, args=(WATCHDOG.comm, stopping), name="hpcdist-watchdog", daemon=True)
    WATCHDOG.thread, WATCHDOG.stopping = thread, stopping
    thread.start()
    return True


def finish() -> None:
    """This rank's program has ended: say so in its ledger, and wait, still answering, until every rank's has.

    The wait has no deadline of its own, like MPI_Finalize after it: a rank still running either finishes,
    or waits in a call that its watchdog times out, and then the report names this rank as finished.
    A no-op without a reserved communicator, or when the program finalised MPI itself.
    """
    from mpi4py import MPI

    LEDGER.enter(FINISHED)
    if WATCHDOG.comm is None or MPI.Is_finalized():
        return
    if WATCHDOG.thread is None:
        start(WATCHDOG.contract, *WATCHDOG.limits)
    done = WATCHDOG.finishing = threading.Event()
    WATCHDOG.nudge.set()
    done.wait()
    stop()


def stop(wait: float | None = None) -> None:
    """Stop this rank's watchdog thread, waiting `wait` seconds at most (None: until it ends); local, and the
    duplicate communicator is left to MPI_Finalize."""
    thread, stopping = WATCHDOG.thread, WATCHDOG.stopping
    WATCHDOG.thread = WATCHDOG.stopping = WATCHDOG.comm = WATCHDOG.finishing = WATCHDOG.link = None
    if thread is not None and stopping is not None:
        stopping.set()
        WATCHDOG.nudge.set()
        thread.join(wait)


def _watch(comm: Any, stopping: threading.Event) -> None:
    """The watchdog thread; it lets a finishing main thread go on if it ends for any reason."""
    try:
        _serve(comm, stopping)
    finally:
        finishing = WATCHDOG.finishing
        if finishing is not None:
            finishing.set()


def rebase(comm: Any) -> None:
    """After a recovery under --on-failure shrink: watch over the survivors' `comm` from now on (a Dup: collective
    over it), its ranks numbered as in it, calls still in flight from before void; a no-op without a watchdog."""
    if WATCHDOG.comm is not None:
        for entry in list(LEDGER.entries):
            if not entry.done:
                entry.finish()  # the call that failed: the recovery voided it
        WATCHDOG.comm, WATCHDOG.lost, WATCHDOG.quiet_until = comm.Dup(), set(), 0.0
        WATCHDOG.link = None  # no leader has registered on the survivors' communicator: digests come directly
        WATCHDOG.since = time.monotonic()


def _serve(comm: Any, stopping: threading.Event) -> None:
    """Answer ledger requests; alarm the reporter once when this rank waits too long; once finishing, await the others.

    Under --on-failure shrink (`hung`), a rank that failed is acknowledged and left out from then on, the lowest live
    rank reports, a later hang alarms again, and a rank told that it never arrived ends itself; after a recovery
    the thread goes on over the survivors' communicator (`rebase`).
    """
    shrinking = WATCHDOG.contract.shrinks
    seen: dict[str, Any] = {"alarmed": None, "sent": [], "barrier": None}
    pause = _POLL
    while not _rest(stopping, pause):
        if WATCHDOG.comm is not None and WATCHDOG.comm is not comm:  # rebased on the survivors of a failure
            comm, seen = WATCHDOG.comm, {"alarmed": None, "sent": [], "barrier": None}
        try:
            if _cycle(comm, seen, shrinking) or _agreed_soon(seen, stopping):
                return
        except Exception as exc:
            if not (shrinking and hung.is_failure(exc)):
                raise
            acknowledge(comm)
            seen["barrier"] = None  # a finishing agreement starts again among the survivors
        pause = _POLL if seen["barrier"] is None else 0.0  # a pending agreement is tested between the cycles


def _agreed_soon(seen: dict[str, Any], stopping: threading.Event) -> bool:
    """Test the others' agreement that every program has ended alone until the next cycle is due (_POLL s): every
    _FIRST s for its first _QUICK s, then every _LATER s; whether it completed.

    Measured, 64 ranks on 2 cores: from the last program's end to the job's, 0.45-0.56 s with a test each 0.1 s
    cycle, 0.26-0.31 s (plain mpirun's 0.28 s) with these. A rank that finished 3 s before the others spends 8-13 ms
    more CPU on them (a whole cycle each millisecond instead: 30-65 ms).
    """
    barrier = seen["barrier"]
    if barrier is None:
        return False
    due = time.monotonic() + _POLL
    while (now := time.monotonic()) < due and not stopping.is_set():
        time.sleep(_FIRST if now - seen["posted"] < _QUICK else _LATER)
        with agreeing():
            if barrier.Test():
                return True
    return False


def _rest(stopping: threading.Event, seconds: float) -> bool:
    """Pause the thread `seconds` at most, less when nudged (the program finished, or `stop`); whether to stop."""
    WATCHDOG.nudge.wait(seconds)
    WATCHDOG.nudge.clear()
    return stopping.is_set()


def _cycle(comm: Any, seen: dict[str, Any], shrinking: bool) -> bool:
    """One turn of the watchdog thread; True when it is done (every rank has finished, or the job ends). Its calls
    wait for the world's agreement to be tested (`agreeing`), but a hang report's gathering does not: it waits on
    the other ranks' watchdogs, and they on their own agreement."""
    with agreeing():
        kind = _listen(comm, seen, shrinking)
    if "lead" in seen:  # the reporter asked this rank to gather its host's digests
        asker, number, members = seen.pop("lead")
        gather.lead(comm, asker, number, members, link(comm))
    if kind and report_hang(comm, kind, shrinking):
        return True
    if WATCHDOG.finishing is not None:
        with agreeing():
            if seen["barrier"] is None:
                seen["flag"] = array.array("i", [1])  # kept alive while the agreement runs
                seen["barrier"] = comm.Iagree(seen["flag"]) if shrinking else comm.Ibarrier()
                seen["posted"] = time.monotonic()
            elif seen["barrier"].Test():
                return True
    return False


def _listen(comm: Any, seen: dict[str, Any], shrinking: bool) -> str:
    """Answer a ledger request, heed an order to end, alarm the reporter once when this rank waits too long; the
    hang to report ('call', 'init'), or '' when this rank does not report one now."""
    from mpi4py import MPI

    status = _status()
    message = comm.improbe(source=MPI.ANY_SOURCE, tag=gather.ASK, status=status)
    if message is not None:
        message.recv()
        comm.send(own_answer(), dest=status.Get_source(), tag=gather.ANSWER)
    asked = gather.serve(comm, link(comm))
    if asked is not None:
        seen["lead"] = asked
    if shrinking and (word := comm.improbe(source=MPI.ANY_SOURCE, tag=hung.END_TAG)) is not None:
        hung.heard(WATCHDOG.contract, comm.rank, word.recv(), sources.snapshot(LEDGER))
    for work in WATCHDOG.cycles:
        work(comm)
    late, reports = _late(*WATCHDOG.limits), reporter(comm)
    if shrinking and not late:
        seen["alarmed"] = None  # its call ended (or failed): a later hang alarms again
    if late and (seen["alarmed"] is None or (shrinking and seen["alarmed"] != (late, reports))):
        seen["alarmed"] = (late, reports)  # under shrink, alarmed again if the reporter failed
        if comm.rank != reports:
            seen["sent"].append(comm.isend(late, dest=reports, tag=_ALARM))
        else:
            seen["own"] = late
    if comm.rank == reports and time.monotonic() >= WATCHDOG.quiet_until:
        alarm = comm.improbe(source=MPI.ANY_SOURCE, tag=_ALARM)
        heard = alarm.recv() if alarm is not None else ""  # a matched alarm is received, even when this rank's own
        return str(seen.pop("own", "") or heard)
    return ""


def _late(timeout: float, init_timeout: float) -> str:
    """Why this rank waits too long: 'call' (a pending call), 'init' (init_process_group), or '' if it does not."""
    now, pending, below = time.monotonic(), LEDGER.pending(), sources.oldest_pending(WATCHDOG.since)
    if pending is not None or below is not None:
        oldest = min(pending.started if pending is not None else now, below if below is not None else now)
        return "call" if now - oldest > timeout else ""
    return "init" if LEDGER.phase == INITIALISING and now - LEDGER.since > init_timeout else ""


def _status() -> Any:
    """A fresh MPI status object."""
    from mpi4py import MPI

    return MPI.Status()
