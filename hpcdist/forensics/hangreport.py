"""The hang report: what each rank answers, the gathering of every rank's answer, and the report printed and saved.

A rank's answer is its phase and its ledger of calls (`recording`), with the calls below dist.* merged in
(`sources.py`: the mpi backend's own records, torch's Flight Recorder) and every part contributed (`contribute`:
collect's stacks, frdump's). The reporter (rank 0, or under shrink the lowest live rank) gathers them over the
watchdog's communicator (`gather`: a digest of each by host first, then a few full answers per state), prints what
each rank was doing and the first divergence, saves the Flight Recorder dumps and the stacks, and aborts the job;
under --on-failure shrink, the ranks that never arrived end themselves instead and the others carry on (`hung`).
The watchdog's state (`WATCHDOG`) lives here, beside the report that reads most of it; its thread is watchdog.py's.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..abort import abort_job
from ..commcall import Call
from ..contract import RankContract
from ..ranklist import ranks_text
from ..records import field, record
from ..settings import debug
from ..settingtable import STARTUP_TIMEOUT, TIMEOUT
from . import digest, frdump, gather, hung, sources, stacks
from .answers import MAX_ANSWER, bounded
from .cause import tell_hang
from .ledger import describe_hang
from .recording import LEDGER

__all__ = [
    "WATCHDOG",
    "acknowledge",
    "ask_all",
    "contribute",
    "link",
    "own_answer",
    "report_hang",
    "reporter",
    "summarised",
    "survey",
]


@record
class _Watchdog:
    """This rank's watchdog: its communicator, its limits, its thread, and what the thread has learnt.

    One per process (`WATCHDOG`): it watches the ledger of torch's process-wide functions, MPI_Finalize stops it
    from a callback, and the shim, `hpcdist.init`, a failing program's report (collect) and a recovery each reach
    it without a handle to pass between them. It lives here, beside the report that reads most of it.
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


WATCHDOG = _Watchdog()


def contribute(name: str, part: Callable[[], Any]) -> None:
    """Add `part()` to every answer this rank gives, under `name` (called on the watchdog thread when asked)."""
    WATCHDOG.parts[name] = part


def reporter(comm: Any) -> int:
    """The rank that reports a hang: rank 0, or under shrink the lowest rank that has not failed."""
    return next(rank for rank in range(comm.size) if rank not in WATCHDOG.lost)


def ask_all() -> dict[int, dict[str, Any]] | None:
    """Every rank's full answer (waiting a few seconds at most); None without a watchdog."""
    comm = WATCHDOG.comm
    return None if comm is None else gather.full(comm, _others(comm), link(comm))


def survey() -> tuple[dict[int, dict[str, Any]], list[int]] | None:
    """Every rank's answer as a hang report gathers them, digest first (`gather.gather`): rank -> its answer, full or
    filled with a rank's in the same state, and the ranks that answered in full; None without a watchdog."""
    comm = WATCHDOG.comm
    if comm is None:
        return None
    WATCHDOG.reports += 1
    answers, whole, intake = gather.gather(comm, WATCHDOG.reports, link(comm))
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
    calls, void = sources.snapshot(LEDGER), time.monotonic() - WATCHDOG.since
    for call in calls:
        if call.age > void:  # it started before a rebase: the recovery voided it
            call.done = True
    return calls


def own_answer() -> dict[str, Any]:
    """What this rank tells the rank that asks: its phase, its ledger, and every contributed part."""
    answer: dict[str, Any] = {"phase": LEDGER.state(), "ledger": _calls()}
    for name, part in WATCHDOG.parts.items():
        answer[name] = part()
    return bounded(answer)


def acknowledge(comm: Any) -> None:
    """Note the ranks of `comm` that failed (acknowledged: receives from any source work again), unless it was
    replaced meanwhile."""
    lost = hung.acknowledge(comm)
    if WATCHDOG.comm is comm:
        WATCHDOG.lost = lost


def link(comm: Any) -> gather.Link:
    """What the report's gathering reaches of this watchdog, made once for its communicator (a rebase starts anew)."""
    if WATCHDOG.link is None:
        WATCHDOG.link = gather.Link(
            digest=lambda: digest.digest(_calls(), LEDGER.state()),
            answer=own_answer,
            lost=lambda: WATCHDOG.lost,
            failed=lambda: acknowledge(comm),
            kept=WATCHDOG.asks,
        )
    return WATCHDOG.link


def _others(comm: Any) -> list[int]:
    """Every rank of `comm` but this one and those that failed."""
    return [rank for rank in range(comm.size) if rank != comm.rank and rank not in WATCHDOG.lost]


def report_hang(comm: Any, kind: str, shrinking: bool) -> bool:
    """The reporter: gather every rank's ledger (waiting briefly) and print the hang report; under shrink, the ranks
    that never arrived end themselves and the job goes on (False); otherwise, or when that cannot be, the job ends."""
    WATCHDOG.reports += 1
    answers, whole, intake = gather.gather(comm, WATCHDOG.reports, link(comm))
    ledgers = {rank: answer["ledger"] for rank, answer in answers.items()}
    phases = {rank: answer["phase"] for rank, answer in answers.items()}
    lost = WATCHDOG.lost
    missing = [rank for rank in range(comm.size) if rank not in answers and rank not in lost]
    timeout, init_timeout = WATCHDOG.limits
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
        WATCHDOG.asks.extend(hung.tell(comm, ending, ledgers, why))
        one = len(ending) == 1
        print(
            f"hpcdist: {ranks_text(ending)} never arrived and {'ends itself' if one else 'end themselves'} "
            "(--on-failure shrink): the others' call fails with a process failure, and they carry on without "
            f"{'it' if one else 'them'}",
            file=sys.stderr,
            flush=True,
        )
        WATCHDOG.quiet_until = time.monotonic() + gather.WINDOW  # alarms sent before the verdict took effect wait
        if comm.rank in ending:
            word = (hung.progress(ledgers[comm.rank]), why)
            hung.heard(WATCHDOG.contract, comm.rank, word, sources.snapshot(LEDGER))
        return False
    if shrinking:
        print(f"hpcdist: the job ends instead of shrinking: {why}", file=sys.stderr, flush=True)
    try:
        tell_hang(WATCHDOG.contract, comm.rank, ledgers, phases)  # the ranks it blames first, this rank's abort after
        print(frdump.save(answers, comm.size, timeout, WATCHDOG.contract), file=sys.stderr, flush=True)
        found, finished = stacks.in_answers(answers)
        if found:
            from . import pyspy  # loaded by a hang's report alone

            print(stacks.report(found, pyspy.fill(found, missing), finished=finished), file=sys.stderr, flush=True)
    finally:
        abort_job(1)  # whatever happened to the dumps and the stacks
    return True
