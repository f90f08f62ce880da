"""The hang report's gathering over MPI: every rank's digest by host first, then a few ranks' full answers per state.

The reporter asks each host's leader (its lowest live rank) for its host's summary (`digest.merge`): the leader
asks its host's ranks for their digests, waits LEAD_WINDOW at most, and sends one message. A host whose summary
has not come within HOST_WINDOW, and every rank its leader did not hear from, the reporter asks directly, until
WINDOW; a rank that answers nobody is missing from the report. Then the reporter asks the first two and the last
rank of each state for their full answer (`_answer`: phase, calls, stacks, dump) and gives the others their
state's calls (`digest.Tally.filled`). Which ranks a leader leads, it says once, as its watchdog starts
(`register`); ranks no registration covers, or two do, are asked directly (`digest.hosts`), so a placement other
than the default costs messages, never correctness. Every message carries the report's number: a late one from
an earlier report is counted but not taken.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import WaitTimeout
from ..records import field, record
from ..waits import Backoff, poll_until
from . import hung
from .digest import Digest, Intake, Tally, hosts, merge, sent

__all__ = [
    "ANSWER",
    "ASK",
    "LEAD_WINDOW",
    "WINDOW",
    "Link",
    "full",
    "gather",
    "lead",
    "register",
    "serve",
    "take_registrations",
]

ASK, ANSWER = 7302, 7303  # the reporter's ask for a full answer, and the answer
_REGISTER, _DIGEST_ASK, _DIGEST, _HOST_ASK, _HOST = 7306, 7307, 7308, 7309, 7310
WINDOW = 3.0  # each round's limit: the digests', the full answers'
HOST_WINDOW = 1.5  # the reporter waits this long for a host's summary before asking its ranks directly
LEAD_WINDOW = 1.0  # a leader waits this long for its host's digests
_BACKOFF = (0.01, 0.01)


@record
class Link:
    """What the gathering needs of this rank's watchdog: its answers, its failed ranks, where requests are kept."""

    digest: Callable[[], Digest]  # this rank's digest, now
    answer: Callable[[], dict[str, Any]]  # this rank's full answer, now
    lost: Callable[[], set[int]]  # the ranks known to have failed (under shrink)
    failed: Callable[[], None]  # acknowledge a failure MPI just reported (under shrink)
    kept: list[Any]  # requests that may never complete (their peer died or froze): kept until the job ends
    registered: dict[int, Sequence[int]] = field(default_factory=dict)  # leader -> the ranks it said it leads
    registrations: list[int] = field(default_factory=list)  # their sizes in bytes, until a report counts them


def register(comm: Any, ranks: Sequence[int], reporter: int, link: Link) -> None:
    """As the watchdog starts: a leader (the first of its host's `ranks`) tells the reporter which ranks it leads."""
    if len(ranks) < 2 or ranks[0] != comm.rank:
        return
    if comm.rank == reporter:
        link.registered[comm.rank] = list(ranks)
    else:
        link.kept.append(comm.isend(list(ranks), dest=reporter, tag=_REGISTER))


def take_registrations(comm: Any, link: Link) -> None:
    """The reporter: receive the leaders' registrations that came, each cycle, so that none is left unreceived when
    MPI finalizes (MPICH over UCX warns of each such message as the job ends)."""
    from mpi4py import MPI

    status = MPI.Status()
    while (message := _probe(comm, _REGISTER, status, link)) is not None:
        link.registered[status.Get_source()] = message.recv()
        link.registrations.append(status.Get_count())


def serve(comm: Any, link: Link) -> tuple[int, int, list[int]] | None:
    """On every rank's watchdog cycle: take the registrations that came, send its digest to whoever asks; the
    reporter's ask to lead its host, if one came: (the reporter, the report's number, the ranks to ask), for `lead`."""
    from mpi4py import MPI

    take_registrations(comm, link)
    status = MPI.Status()
    message = comm.improbe(source=MPI.ANY_SOURCE, tag=_DIGEST_ASK, status=status)
    if message is not None:
        number = message.recv()
        _send(comm, (number, tuple(link.digest())), status.Get_source(), _DIGEST, link)
    message = comm.improbe(source=MPI.ANY_SOURCE, tag=_HOST_ASK, status=status)
    if message is None:
        return None
    number, members = message.recv()
    return status.Get_source(), number, members


def lead(comm: Any, asker: int, number: int, members: Sequence[int], link: Link) -> None:
    """The leader's round: its members' digests, waited for LEAD_WINDOW at most, sent to `asker` as one summary
    (with the ranks it did not hear from). Like the reporter's rounds, it waits on other ranks' watchdogs, so it
    runs outside the lock around the world's agreement (`abort.agreeing`)."""
    for rank in members:
        _send(comm, number, rank, _DIGEST_ASK, link)
    digests = {comm.rank: link.digest()}

    def heard(source: int, taken: Any) -> None:
        if taken[0] == number and source in members:
            digests[source] = Digest(*taken[1])

    _receive(comm, {_DIGEST: heard}, lambda: set(members) <= digests.keys() | link.lost(), LEAD_WINDOW, link)
    silent = [rank for rank in members if rank not in digests]
    _send(comm, (number, sent(merge(digests)), silent), asker, _HOST, link)


def gather(comm: Any, number: int, link: Link) -> tuple[dict[int, dict[str, Any]], list[int], Intake]:
    """The reporter's (or a failed rank's, which no leader registered with) two rounds: every rank's answer it could
    make (full or filled), the ranks that answered in full, and what it received."""
    intake = Intake()
    take_registrations(comm, link)
    for size in link.registrations:
        intake.count("host registration", size)
    link.registrations.clear()
    groups, direct = hosts(link.registered, comm.size, comm.rank, link.lost())
    tally = Tally()
    tally.add(merge({comm.rank: link.digest()}))
    for leader, members in groups.items():
        _send(comm, (number, members), leader, _HOST_ASK, link)
    asked = set(direct)
    for rank in direct:
        _send(comm, number, rank, _DIGEST_ASK, link)

    def ask(ranks: Sequence[int]) -> None:
        for rank in ranks:
            if rank not in asked and rank not in tally.keys and rank not in link.lost():
                asked.add(rank)
                _send(comm, number, rank, _DIGEST_ASK, link)

    def summary(source: int, taken: Any) -> None:
        if taken[0] == number and groups.pop(source, None) is not None:
            tally.add(taken[1])
            ask(taken[2])  # the ranks its leader did not hear from

    def one(source: int, taken: Any) -> None:
        if taken[0] == number:
            tally.add(merge({source: Digest(*taken[1])}))

    began = time.monotonic()

    def done() -> bool:
        if groups and time.monotonic() - began > HOST_WINDOW:  # leaders that froze or died: their ranks directly
            for leader, members in list(groups.items()):
                ask([leader, *members])
            groups.clear()
        return len(tally.keys.keys() | link.lost()) == comm.size

    _receive(comm, {_HOST: summary, _DIGEST: one}, done, WINDOW, link, intake)
    chosen = [rank for rank in tally.chosen() if rank != comm.rank]
    answers = full(comm, chosen, link, intake)
    return tally.filled(answers), sorted(answers), intake


def full(comm: Any, ranks: Sequence[int], link: Link, intake: Intake | None = None) -> dict[int, dict[str, Any]]:
    """Ask `ranks` for their full answer and wait WINDOW at most: rank -> answer, this rank's own included.

    A rank that does not answer is left out (the caller names it); so is one that failed (under shrink). The asks
    are kept until the job ends, as a rank that never answers never receives its ask.
    """
    for rank in ranks:
        _send(comm, None, rank, ASK, link)
    answers = {comm.rank: link.answer()}

    def answer(source: int, taken: Any) -> None:
        answers[source] = taken

    _receive(comm, {ANSWER: answer}, lambda: set(ranks) <= answers.keys() | link.lost(), WINDOW, link, intake)
    return answers


_KINDS = {ANSWER: "full answer", _HOST: "host summary", _DIGEST: "rank summary"}


def _receive(
    comm: Any,
    takers: Mapping[int, Callable[[int, Any], None]],
    done: Callable[[], bool],
    window: float,
    link: Link,
    intake: Intake | None = None,
) -> None:
    """Hand each message of the takers' tags to its taker (source, message) until `done()` or `window` seconds."""
    from mpi4py import MPI

    status = MPI.Status()

    def heard() -> bool:
        for tag, take in takers.items():
            message = _probe(comm, tag, status, link)
            if message is not None:
                source, size = status.Get_source(), status.Get_count()
                take(source, message.recv())
                if intake is not None:
                    intake.count(_KINDS[tag], size)
        return done()

    with contextlib.suppress(WaitTimeout):  # a rank that does not answer is named in the report
        poll_until(heard, time.monotonic() + window, str, backoff=Backoff(*_BACKOFF))


def _probe(comm: Any, tag: int, status: Any, link: Link) -> Any:
    """A message of `tag` from any rank, or None; under shrink, a failure MPI reports meanwhile is acknowledged."""
    from mpi4py import MPI

    try:
        return comm.improbe(source=MPI.ANY_SOURCE, tag=tag, status=status)
    except Exception as exc:
        if not hung.is_failure(exc):
            raise
        link.failed()
        return None


def _send(comm: Any, what: Any, rank: int, tag: int, link: Link) -> None:
    """Send `what` to `rank` without waiting (the request kept); under shrink, a rank that failed is skipped."""
    try:
        link.kept.append(comm.isend(what, dest=rank, tag=tag))
    except Exception as exc:
        if not hung.is_failure(exc):
            raise
        link.failed()
