"""Hang forensics: on a timeout, gather every rank's ledger of calls (`recording`) over MPI and report the hang.

The ledger holds the dist.* calls; calls below them (DDP's, the object collectives') come from sources
(`sources.py`: the mpi backend's own records, torch's Flight Recorder), merged in when a rank answers and
polled with the ledger for a call older than the timeout.

Every rank runs a watchdog thread on its own duplicate of COMM_WORLD. When a rank's oldest
unfinished call is older than the job's timeout (or its init_process_group older than the start-up
timeout), it alarms rank 0, whose watchdog asks every rank for its phase and ledger (the threads
answer even while their main threads are blocked in a call; `gather`: a digest of each by host first, then a few
full answers per state), prints what each rank was doing and the first divergence, and aborts the job; under
--on-failure shrink, the ranks that never arrived end themselves instead and the others carry on (`hung`). Under
the shim, a rank whose program has ended keeps answering until every rank's program has (`finish`), so the report
can name it.
"""

from __future__ import annotations

import array
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..abort import abort_job, agreeing, before_finalize
from ..commcall import Call
from ..contract import RankContract
from ..errors import RendezvousTimeout
from ..ranklist import ranks_text
from ..settings import debug
from ..settingtable import STARTUP_TIMEOUT, TIMEOUT
from ..waits import Backoff, poll_until
from . import digest, frdump, gather, hung, sources, stacks
from .answers import MAX_ANSWER, bounded
from .cause import tell_hang
from .ledger import FINISHED, INITIALISING, describe_hang
from .recording import LEDGER

__all__ = [
    "ask_all",
    "contribute",
    "each_cycle",
    "finish",
    "rebase",
    "reporter",
    "reserve",
    "start",
    "stop",
    "summarised",
    "survey",
]

_ALARM = 7301
_POLL = 0.1
_FIRST = 1e-3  # once the program has ended: the first pause before the others' agreement is tested, doubling to _POLL
_FINALIZE_WAIT = 2.0  # seconds MPI_Finalize waits for the thread to stop (it is woken at once)


@dataclass
class _Watchdog:
    """This rank's watchdog: its communicator, its limits, its thread, and what the thread has learnt.

    One per process (`_WATCHDOG`): it watches the ledger of torch's process-wide functions, MPI_Finalize stops it
    from a callback, and the shim, `hpcdist.init`, a failing program's report (collect) and a recovery each reach
    it without a handle to pass between them.
    """

    contract: RankContract = field(default_factory=RankContract)  # the launcher's: shrink, and where to tell
    comm: Any = None  # its duplicate of COMM_WORLD (after a recovery, of the survivors'), once reserved
    limits: tuple[float, float] = (0.0, 0.0)  # (a call's timeout, init_process_group's)
    thread: threading.Thread | None = None
    stopping: threading.Event | None = None
    finishing: threading.Event | None = None  # set while the program has ended and the rank waits for the others
    nudge: threading.Event = field(default_factory=threading.Event)  # cuts the thread's pause short: finish, stop
    lost: set[int] = field(default_factory=set)  # under shrink: ranks of `comm` that failed (acknowledged)
    quiet_until: float = 0.0  # alarms before this (monotonic) time belong to the verdict just given
    since: float = 0.0  # when it was last rebased: calls in flight from before are void
    parts: dict[str, Callable[[], Any]] = field(default_factory=dict)  # what an answer adds to phase and ledger
    cycles: list[Callable[[Any], None]] = field(default_factory=list)  # what else the thread does each cycle
    asks: list[Any] = field(default_factory=list)  # asks sent to ranks that have not answered: kept until the end
    link: gather.Link | None = None  # what the report's gathering reaches of this watchdog (for its communicator)
    reports: int = 0  # hang reports this rank has gathered: each one's messages carry its number


_WATCHDOG = _Watchdog()


def contribute(name: str, part: Callable[[], Any]) -> None:
    """Add `part()` to every answer this rank gives, under `name` (called on the watchdog thread when asked)."""
    _WATCHDOG.parts[name] = part


def each_cycle(work: Callable[[Any], None]) -> None:
    """Have the watchdog thread call `work(comm)` each cycle (every 0.1 s), after answering a request."""
    if work not in _WATCHDOG.cycles:
        _WATCHDOG.cycles.append(work)


def ask_all() -> dict[int, dict[str, Any]] | None:
    """Every rank's full answer (waiting a few seconds at most); None without a watchdog."""
    comm = _WATCHDOG.comm
    return None if comm is None else gather.full(comm, _others(comm), _link(comm))


def survey() -> tuple[dict[int, dict[str, Any]], list[int]] | None:
    """Every rank's answer as a hang report gathers them, digest first (`gather.gather`): rank -> its answer, full or
    filled with a rank's in the same state, and the ranks that answered in full; None without a watchdog."""
    comm = _WATCHDOG.comm
    if comm is None:
        return None
    _WATCHDOG.reports += 1
    answers, whole, intake = gather.gather(comm, _WATCHDOG.reports, _link(comm))
    if debug(os.environ):
        print(f"hpcdist: rank {comm.rank} received {intake} for the other ranks' stacks", file=sys.stderr, flush=True)
    return answers, whole


def summarised(answers: Mapping[int, Any], whole: Sequence[int]) -> str:
    """The line that says which ranks answered in full, when others sent only a summary ('' when all answered)."""
    if len(whole) >= len(answers):
        return ""
    return (
        f"hpcdist: {ranks_text(whole)} answered in full; the other {len(answers) - len(whole):,} ranks sent a "
        "summary of their state and are shown with the calls of a rank in the same state (only the ranks that "
        "answered in full give stacks)"
    )


def _calls() -> list[Call]:
    """This rank's calls as an answer sends them (ages relative to now), those from before a rebase ended."""
    calls, void = sources.snapshot(LEDGER), time.monotonic() - _WATCHDOG.since
    for call in calls:
        if call.age > void:  # it started before a rebase: the recovery voided it
            call.done = True
    return calls


def _answer() -> dict[str, Any]:
    """What this rank tells the rank that asks: its phase, its ledger, and every contributed part."""
    answer: dict[str, Any] = {"phase": LEDGER.state(), "ledger": _calls()}
    for name, part in _WATCHDOG.parts.items():
        answer[name] = part()
    return bounded(answer)


def reserve(contract: RankContract, timeout: float, init_timeout: float) -> bool:
    """Duplicate COMM_WORLD for this rank's watchdog now (collective), so that `start` and `finish` are local.

    The shim calls this while every rank is in step, before the program runs; the timeouts are those a
    thread started by `finish` uses. False when MPI cannot host a watchdog thread.

    Raises:
        RendezvousTimeout: a rank did not come to the duplication within `init_timeout`.
    """
    from mpi4py import MPI

    _WATCHDOG.contract = contract
    if _WATCHDOG.comm is None:
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return False
        _WATCHDOG.comm = _duplicate(MPI.COMM_WORLD, init_timeout)
        before_finalize(lambda: stop(_FINALIZE_WAIT))  # the thread stops before the program's own MPI.Finalize()
    _WATCHDOG.limits = (timeout, init_timeout)
    return True


def _duplicate(world: Any, timeout: float) -> Any:
    """`world`'s duplicate, its completion waited for in pauses: in a blocking MPI_Comm_dup the ranks that came first
    spin and take the cores of those still starting (measured: 1.6 s of 16 ranks' start-up, oversubscribed on 2
    cores).

    Raises:
        RendezvousTimeout: it did not complete within `timeout` seconds; the message says who waited for what.
    """
    comm, request = world.Idup()
    poll_until(
        request.Test,
        time.monotonic() + timeout,
        lambda: (
            f"rank {world.rank} of {world.size} on {socket.gethostname()} waited {timeout:g} s for every rank to "
            "copy the world communicator for hang forensics during start-up; a rank may have died or hung before "
            f"reaching it (raise {STARTUP_TIMEOUT.name} if start-up is just slow)"
        ),
        backoff=Backoff(1e-5, 0.01),
        error=RendezvousTimeout,
    )
    return comm


def start(contract: RankContract, timeout: float, init_timeout: float | None = None) -> bool:
    """Start this rank's watchdog thread, or give the running one these timeouts; True when this call started it.

    A call older than `timeout`, or a wait in init_process_group older than `init_timeout` (default:
    `timeout`), sets off the hang report. Collective over COMM_WORLD unless `reserve` ran; False if MPI
    cannot host the thread.
    """
    limits = (timeout, init_timeout or timeout)
    contribute(frdump.PART, frdump.local_part)
    if _WATCHDOG.thread is not None:
        _WATCHDOG.limits = limits
        return False
    if not reserve(contract, *limits):
        return False
    comm = _WATCHDOG.comm  # its host's leader says which ranks it leads (torch's variables, which the bootstrap set)
    gather.register(comm, digest.place(os.environ, comm.rank, comm.size), reporter(comm), _link(comm))
    stopping = threading.Event()
    thread = threading.Thread(target=_watch, args=(_WATCHDOG.comm, stopping), name="hpcdist-watchdog", daemon=True)
    _WATCHDOG.thread, _WATCHDOG.stopping = thread, stopping
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
    if _WATCHDOG.comm is None or MPI.Is_finalized():
        return
    if _WATCHDOG.thread is None:
        start(_WATCHDOG.contract, *_WATCHDOG.limits)
    done = _WATCHDOG.finishing = threading.Event()
    _WATCHDOG.nudge.set()
    done.wait()
    stop()


def stop(wait: float | None = None) -> None:
    """Stop this rank's watchdog thread, waiting `wait` seconds at most (None: until it ends); local, and the
    duplicate communicator is left to MPI_Finalize."""
    thread, stopping = _WATCHDOG.thread, _WATCHDOG.stopping
    _WATCHDOG.thread = _WATCHDOG.stopping = _WATCHDOG.comm = _WATCHDOG.finishing = _WATCHDOG.link = None
    if thread is not None and stopping is not None:
        stopping.set()
        _WATCHDOG.nudge.set()
        thread.join(wait)


def _watch(comm: Any, stopping: threading.Event) -> None:
    """The watchdog thread; it lets a finishing main thread go on if it ends for any reason."""
    try:
        _serve(comm, stopping)
    finally:
        finishing = _WATCHDOG.finishing
        if finishing is not None:
            finishing.set()


def rebase(comm: Any) -> None:
    """After a recovery under --on-failure shrink: watch over the survivors' `comm` from now on (a Dup: collective
    over it), its ranks numbered as in it, calls still in flight from before void; a no-op without a watchdog."""
    if _WATCHDOG.comm is not None:
        for entry in list(LEDGER.entries):
            if not entry.done:
                entry.finish()  # the call that failed: the recovery voided it
        _WATCHDOG.comm, _WATCHDOG.lost, _WATCHDOG.quiet_until = comm.Dup(), set(), 0.0
        _WATCHDOG.link = None  # no leader has registered on the survivors' communicator: digests come directly
        _WATCHDOG.since = time.monotonic()


def _serve(comm: Any, stopping: threading.Event) -> None:
    """Answer ledger requests; alarm the reporter once when this rank waits too long; once finishing, await the others.

    Under --on-failure shrink (`hung`), a rank that failed is acknowledged and left out from then on, the lowest live
    rank reports, a later hang alarms again, and a rank told that it never arrived ends itself; after a recovery
    the thread goes on over the survivors' communicator (`rebase`).
    """
    shrinking = _WATCHDOG.contract.shrinks
    seen: dict[str, Any] = {"alarmed": None, "sent": [], "barrier": None}
    pause = _POLL
    while not _rest(stopping, pause):
        waited = seen["barrier"] is not None
        if _WATCHDOG.comm is not None and _WATCHDOG.comm is not comm:  # rebased on the survivors of a failure
            comm, seen = _WATCHDOG.comm, {"alarmed": None, "sent": [], "barrier": None}
        try:
            if _cycle(comm, seen, shrinking):
                return
        except Exception as exc:
            if not (shrinking and hung.is_failure(exc)):
                raise
            _acknowledge(comm)
            seen["barrier"] = None  # a finishing agreement starts again among the survivors
        pause = min(_POLL, 2 * pause) if waited else _FIRST if seen["barrier"] is not None else _POLL


def _rest(stopping: threading.Event, seconds: float) -> bool:
    """Pause the thread `seconds` at most, less when nudged (the program finished, or `stop`); whether to stop."""
    _WATCHDOG.nudge.wait(seconds)
    _WATCHDOG.nudge.clear()
    return stopping.is_set()


def _acknowledge(comm: Any) -> None:
    """Note the ranks of `comm` that failed (acknowledged: receives from any source work again), unless it was
    replaced meanwhile."""
    lost = hung.acknowledge(comm)
    if _WATCHDOG.comm is comm:
        _WATCHDOG.lost = lost


def _cycle(comm: Any, seen: dict[str, Any], shrinking: bool) -> bool:
    """One turn of the watchdog thread; True when it is done (every rank has finished, or the job ends). Its calls
    wait for the world's agreement to be tested (`agreeing`), but a hang report's gathering does not: it waits on
    the other ranks' watchdogs, and they on their own agreement."""
    with agreeing():
        kind = _listen(comm, seen, shrinking)
    if "lead" in seen:  # the reporter asked this rank to gather its host's digests
        asker, number, members = seen.pop("lead")
        gather.lead(comm, asker, number, members, _link(comm))
    if kind and _report(comm, kind, shrinking):
        return True
    if _WATCHDOG.finishing is not None:
        with agreeing():
            if seen["barrier"] is None:
                seen["flag"] = array.array("i", [1])  # kept alive while the agreement runs
                seen["barrier"] = comm.Iagree(seen["flag"]) if shrinking else comm.Ibarrier()
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
        comm.send(_answer(), dest=status.Get_source(), tag=gather.ANSWER)
    asked = gather.serve(comm, _link(comm))
    if asked is not None:
        seen["lead"] = asked
    if shrinking and (word := comm.improbe(source=MPI.ANY_SOURCE, tag=hung.END_TAG)) is not None:
        hung.heard(_WATCHDOG.contract, comm.rank, word.recv(), sources.snapshot(LEDGER))
    for work in _WATCHDOG.cycles:
        work(comm)
    late, reports = _late(*_WATCHDOG.limits), reporter(comm)
    if shrinking and not late:
        seen["alarmed"] = None  # its call ended (or failed): a later hang alarms again
    if late and (seen["alarmed"] is None or (shrinking and seen["alarmed"] != (late, reports))):
        seen["alarmed"] = (late, reports)  # under shrink, alarmed again if the reporter failed
        if comm.rank != reports:
            seen["sent"].append(comm.isend(late, dest=reports, tag=_ALARM))
        else:
            seen["own"] = late
    if comm.rank == reports and time.monotonic() >= _WATCHDOG.quiet_until:
        alarm = comm.improbe(source=MPI.ANY_SOURCE, tag=_ALARM)
        heard = alarm.recv() if alarm is not None else ""  # a matched alarm is received, even when this rank's own
        return str(seen.pop("own", "") or heard)
    return ""


def reporter(comm: Any) -> int:
    """The rank that reports a hang: rank 0, or under shrink the lowest rank that has not failed."""
    return next(rank for rank in range(comm.size) if rank not in _WATCHDOG.lost)


def _late(timeout: float, init_timeout: float) -> str:
    """Why this rank waits too long: 'call' (a pending call), 'init' (init_process_group), or '' if it does not."""
    now, pending, below = time.monotonic(), LEDGER.pending(), sources.oldest_pending(_WATCHDOG.since)
    if pending is not None or below is not None:
        oldest = min(pending.started if pending is not None else now, below if below is not None else now)
        return "call" if now - oldest > timeout else ""
    return "init" if LEDGER.phase == INITIALISING and now - LEDGER.since > init_timeout else ""


def _report(comm: Any, kind: str, shrinking: bool) -> bool:
    """The reporter: gather every rank's ledger (waiting briefly) and print the hang report; under shrink, the ranks
    that never arrived end themselves and the job goes on (False); otherwise, or when that cannot be, the job ends."""
    _WATCHDOG.reports += 1
    answers, whole, intake = gather.gather(comm, _WATCHDOG.reports, _link(comm))
    ledgers = {rank: answer["ledger"] for rank, answer in answers.items()}
    phases = {rank: answer["phase"] for rank, answer in answers.items()}
    lost = _WATCHDOG.lost
    missing = [rank for rank in range(comm.size) if rank not in answers and rank not in lost]
    timeout, init_timeout = _WATCHDOG.limits
    ending: list[int] = []
    why = ""
    if shrinking:
        if kind == "call":
            ending, why = hung.verdict(ledgers, phases, missing, timeout, renumbered=bool(lost))
        else:
            why = "the ranks wait in start-up, where there is no group to shrink yet"
        if not ending and not why:
            return False  # the call that alarmed has ended since
    if kind == "init":
        headline = (
            f"init_process_group waited longer than its {init_timeout:g} s start-up timeout "
            f"({STARTUP_TIMEOUT.name}) for the other ranks"
        )
    else:
        headline = f"a communication call exceeded the {timeout:g} s timeout ({TIMEOUT.name})"
    print(f"hpcdist: {headline}", file=sys.stderr)
    print(describe_hang(ledgers, missing, phases), file=sys.stderr, flush=True)
    trimmed = [rank for rank, answer in answers.items() if "trimmed" in answer]
    if trimmed:
        most = max(answers[rank]["trimmed"] for rank in trimmed)
        said = f"{ranks_text(trimmed)}: answers of up to {most:,} bytes trimmed to {MAX_ANSWER:,} (oldest calls first)"
        print(f"hpcdist: {said}", file=sys.stderr, flush=True)
    said = summarised(answers, whole)
    if said:
        print(said, file=sys.stderr, flush=True)
    if debug(os.environ):
        print(f"hpcdist: rank {comm.rank} received {intake} for this report", file=sys.stderr, flush=True)
    if ending:
        _WATCHDOG.asks.extend(hung.tell(comm, ending, ledgers, why))
        one = len(ending) == 1
        print(
            f"hpcdist: {ranks_text(ending)} never arrived and {'ends itself' if one else 'end themselves'} "
            "(--on-failure shrink): the others' call fails with a process failure, and they carry on without "
            f"{'it' if one else 'them'}",
            file=sys.stderr,
            flush=True,
        )
        _WATCHDOG.quiet_until = time.monotonic() + gather.WINDOW  # alarms sent before the verdict took effect wait
        if comm.rank in ending:
            word = (hung.progress(ledgers[comm.rank]), why)
            hung.heard(_WATCHDOG.contract, comm.rank, word, sources.snapshot(LEDGER))
        return False
    if shrinking:
        print(f"hpcdist: the job ends instead of shrinking: {why}", file=sys.stderr, flush=True)
    try:
        tell_hang(_WATCHDOG.contract, comm.rank, ledgers, phases)  # the ranks it blames first, this rank's abort after
        print(frdump.save(answers, comm.size, timeout, _WATCHDOG.contract), file=sys.stderr, flush=True)
        found, finished = stacks.in_answers(answers)
        if found:
            from . import pyspy  # loaded by a hang's report alone

            print(stacks.report(found, pyspy.fill(found, missing), finished=finished), file=sys.stderr, flush=True)
    finally:
        abort_job(1)  # whatever happened to the dumps and the stacks
    return True


def _link(comm: Any) -> gather.Link:
    """What the report's gathering reaches of this watchdog, made once for its communicator (a rebase starts anew)."""
    if _WATCHDOG.link is None:
        _WATCHDOG.link = gather.Link(
            digest=lambda: digest.digest(_calls(), LEDGER.state()),
            answer=_answer,
            lost=lambda: _WATCHDOG.lost,
            failed=lambda: _acknowledge(comm),
            kept=_WATCHDOG.asks,
        )
    return _WATCHDOG.link


def _others(comm: Any) -> list[int]:
    """Every rank of `comm` but this one and those that failed."""
    return [rank for rank in range(comm.size) if rank != comm.rank and rank not in _WATCHDOG.lost]


def _status() -> Any:
    """A fresh MPI status object."""
    from mpi4py import MPI

    return MPI.Status()
