"""Under `--on-failure shrink`, a hung rank ends itself, so that the survivors see a process failure and shrink.

The watchdog's reporter (the lowest live rank) gathers every rank's answer when a call waits past the timeout, as
for the hang report. `verdict` names the ranks that never arrived: each is in no communication call while a call
older than the timeout waits for it. The reporter sends each of them the word (`END_TAG`) with what its answer
showed; the told rank's watchdog thread, alive even while its main thread is stuck in Python or in C that released
the GIL, checks that it has made no call since (a rank that arrived in the meantime goes on), prints its stacks on
its own stderr, tells `hpcdist mpirun`, and SIGKILLs its own process: ULFM reports it failed to the survivors,
whose pending call then raises. Anything else (a rank that did not answer, one that finished or never initialised,
a hang in start-up, every awaited rank in a call) ends the job as without shrink.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..abort import wait_until_read
from ..commcall import Call
from ..contract import RankContract
from ..events import Failed
from ..hosts import this_host
from ..ranklist import ranks_text
from ..settingtable import TIMEOUT
from . import stacks
from .cause import blame
from .ledger import Phase

__all__ = ["END_TAG", "acknowledge", "heard", "is_failure", "progress", "tell", "verdict"]

_P2P = ("send", "recv", "isend", "irecv")
END_TAG = 7305  # the reporter's word to a rank that never arrived: (its progress as answered, what the others wait in)


def is_failure(exc: BaseException) -> bool:
    """Whether `exc` is MPI's word that a process of the communicator failed or that it was revoked (ULFM)."""
    from mpi4py import MPI

    failed = (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED)
    return isinstance(exc, MPI.Exception) and exc.Get_error_class() in failed


def acknowledge(comm: Any) -> set[int]:
    """Acknowledge every failure `comm` knows of (receives from any source work again); the failed ranks of `comm`."""
    from mpi4py import MPI

    comm.Ack_failed()
    group = comm.Get_failed()
    try:
        return set(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), comm.Get_group()))
    finally:
        group.Free()


def progress(calls: Sequence[Call]) -> tuple[Any, ...]:
    """What changes when a rank makes a call: its last recorded call as it stands (a trimmed answer keeps it)."""
    if not calls:
        return ()
    last = calls[-1]
    return (last.seq, last.op, last.peer, last.group, last.gseq, last.done)


def verdict(
    ledgers: Mapping[int, list[Call]],
    phases: Mapping[int, Phase],
    missing: Sequence[int],
    timeout: float,
    renumbered: bool = False,
) -> tuple[list[int], str]:
    """The ranks to end, with what the others wait in; or none, and why the job ends instead ('' if nothing waits).

    Only a rank that a call older than `timeout` waits for is ended (a collective's members, a send's or a receive's
    peer), and only while it is in no communication call: a rank that is merely slower arrives before that, one
    that computes while it is not awaited is left alone, and a late answer is checked again by `heard`.
    `renumbered`: ranks were lost before, so a subgroup's ranks (numbered in the current default group) cannot be
    told apart from the job's start ranks, and a wait in a subgroup names no rank to end.
    """
    waiting, blamed = blame(ledgers, phases)
    late = {rank: rec for rank, rows in ledgers.items() for rec in _pending(rows) if rec.age > timeout}
    if not late:
        return [], ""  # an alarm from a call that has ended since: nothing to do
    if "init_process_group" in waiting.values():
        return [], "ranks wait in init_process_group: there is no group to shrink yet"
    absent = set(missing) | set(blamed["finished"]) | set(blamed["uninit"])
    everyone = sorted(set(ledgers) | set(missing))
    awaited = {rank: _awaited(rec, everyone, renumbered) for rank, rec in late.items()}
    gone = sorted(absent & {peer for peers in awaited.values() for peer in peers})
    if gone:
        silent = sorted(set(gone) & set(missing))
        if silent:
            return [], f"{ranks_text(silent)} did not answer (stuck in C code that holds the GIL), so cannot be told"
        return [], f"{ranks_text(gone)} finished or never initialised: the others' call cannot complete"
    ending = sorted({peer for peers in awaited.values() for peer in peers} & set(blamed["idle"]))
    if not ending and not any(awaited.values()):
        return [], "the late calls wait for no rank known by number (from any source, or a subgroup since a shrink)"
    if not ending:
        return [], "every rank the late calls wait for is in a communication call: no rank failed to arrive"
    calls = {rank: rec for rank, rows in ledgers.items() for rec in _pending(rows)}  # the late ones and the others
    others = [rank for rank, rec in sorted(calls.items()) if set(_awaited(rec, everyone, renumbered)) & set(ending)]
    first = calls[others[0]]
    return ending, (
        f"{ranks_text(others)} waited up to {max(calls[rank].age for rank in others):.1f} s in {first.label()}, past "
        f"the {timeout:g} s timeout ({TIMEOUT.name}), while it was in no communication call"
    )


def _pending(calls: Sequence[Call]) -> list[Call]:
    """The rank's oldest call still in flight, as a list of at most one call."""
    return next(([call] for call in calls if not call.done), [])


def _awaited(call: Call, ranks: Sequence[int], renumbered: bool) -> list[int]:
    """The ranks a call in flight waits for: a send's or a receive's peer, a collective's group; [] when unknown."""
    import json  # a hang's report alone reads a group's ranks

    if call.op in _P2P:
        number = call.peer.partition("=")[2]
        return [int(number)] if number.isdigit() else []  # from any source: whoever it waits for is unknown
    if call.group == "world":
        return list(ranks)
    if renumbered:
        return []
    try:
        members = json.loads(call.group)
    except ValueError:
        return []
    return [rank for rank in members if isinstance(rank, int)]


def tell(comm: Any, ranks: Sequence[int], ledgers: Mapping[int, list[Call]], why: str) -> list[Any]:
    """Send each rank to end the word, with its progress as it answered; the requests (keep them until they end)."""
    return [comm.isend((progress(ledgers[rank]), why), dest=rank, tag=END_TAG) for rank in ranks if rank != comm.rank]


def heard(contract: RankContract, rank: int, word: tuple[tuple[Any, ...], str], calls: Sequence[Call]) -> None:
    """On the told rank's watchdog thread: end this process, unless it made a call since it answered."""
    answered, why = word
    if progress(calls) != answered or any(not call.done for call in calls):
        print(f"hpcdist: rank {rank} arrived after the hang verdict, so it goes on", file=sys.stderr, flush=True)
        return
    headline = f"hpcdist: rank {rank} hung and ends itself (--on-failure shrink): {why}; its Python stacks:"
    print(stacks.report({rank: stacks.own()}, headline=headline), file=sys.stderr, flush=True)
    host = this_host().split(".")[0]
    contract.tell(Failed(rank, how="hung, ended by the watchdog", host=host, at=time.time()))
    wait_until_read((1, 2))
    os.kill(os.getpid(), signal.SIGKILL)
