"""Each rank's ledger of communication calls, and the first divergence between ranks' ledgers."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..commcall import Call
from ..ranklist import ranks_text
from ..records import field, record
from ..settingtable import TIMEOUT

__all__ = [
    "FINISHED",
    "INITIALISED",
    "INITIALISING",
    "LISTED",
    "RUNNING",
    "Ledger",
    "Phase",
    "describe_hang",
    "first_divergence",
    "sent",
]

_P2P_RECV = ("recv", "irecv")
_P2P_SEND = ("send", "isend")
_P2P = _P2P_RECV + _P2P_SEND
_monotonic = time.monotonic
_new = object.__new__
# Where a rank's program is, as far as torch.distributed goes (the shim and init_process_group say so).
RUNNING = "running"  # its program runs but has not called init_process_group
INITIALISING = "initialising"  # waiting in init_process_group for the other ranks
INITIALISED = "initialised"
FINISHED = "finished"  # its program has ended; the shim waits for the other ranks'
LISTED = 16  # ranks the hang report lists one by one; past that, ranks in the same state share a line


class Phase(NamedTuple):
    """A rank's phase as sent to another rank, with how long it has been in it."""

    name: str
    age: float


@record
class Ledger:
    """The last `size` communication calls of this rank (a ring buffer; cheap to append to)."""

    size: int = 256
    seq: int = 0
    entries: deque[Call] = field(default_factory=deque)
    collectives: dict[str, int] = field(default_factory=dict)
    phase: str = RUNNING
    since: float = field(default_factory=time.monotonic)

    def enter(self, phase: str) -> None:
        """Record that this rank's program entered `phase` (RUNNING, INITIALISING, INITIALISED, FINISHED)."""
        self.phase, self.since = phase, time.monotonic()

    def state(self) -> Phase:
        """The phase, to send to another rank."""
        return Phase(self.phase, time.monotonic() - self.since)

    def __post_init__(self) -> None:
        self.entries = deque(self.entries, maxlen=self.size)  # the ring buffer drops the oldest call itself

    def start(self, op: str, peer: str, shape: tuple[int, ...], dtype: object, group: str) -> Call:
        """Record a call as it begins (about a microsecond: it runs on every call); the dtype is named when sent."""
        self.seq += 1
        gseq = 0
        if op not in _P2P:
            gseq = self.collectives[group] = self.collectives.get(group, 0) + 1
        # Made field by field, which costs less than __init__ on this path, every call's (test_commcall checks them).
        entry = _new(Call)
        entry.op = op
        entry.peer = peer
        entry.shape = shape
        entry.dtype = dtype
        entry.group = group
        entry.gseq = gseq
        entry.started = _monotonic()
        entry.ended = None
        entry.done = False
        entry.backward = False
        entry.seq = self.seq
        self.entries.append(entry)
        return entry

    def keep(self, trace: deque[Call] | None) -> None:
        """Also append every new call to `trace` (a bounded deque: it keeps the latest), or stop when None.

        Gives this ledger alone a recording `start`, so a ledger that never traces pays nothing per call.
        """
        self.__dict__.pop("start", None)
        if trace is not None:
            plain, append = type(self).start, trace.append

            def start(op: str, peer: str, shape: tuple[int, ...], dtype: object, group: str) -> Call:
                entry = plain(self, op, peer, shape, dtype, group)  # (start's own parameters, passed on as they are)
                append(entry)
                return entry

            self.__dict__["start"] = start

    def pending(self) -> Call | None:
        """The oldest call that has not finished, if any."""
        return next((e for e in list(self.entries) if not e.done), None)  # a copy: the main thread appends

    def snapshot(self) -> list[Call]:
        """The entries as a rank's answer sends them (`sent`)."""
        return sent([e.copy() for e in list(self.entries)], time.monotonic())  # a copy: the main thread appends


def sent(calls: list[Call], now: float) -> list[Call]:
    """`calls` (copies, changed in place) as a rank's answer sends them: times relative to `now` (each call's `age`
    is how long before the answer it started), whether each ended but not when (the report needs no more), and equal
    names and shapes one object each (pickled once, then referred to: the reporter takes N answers)."""
    shared: dict[object, Any] = {}
    for call in calls:
        call.started -= now
        call.ended = None
        call.op = shared.setdefault(call.op, call.op)
        call.peer = shared.setdefault(call.peer, call.peer)
        call.shape = shared.setdefault(call.shape, call.shape)
        call.dtype = shared.setdefault(call.dtype, call.dtype)
        call.group = shared.setdefault(call.group, call.group)
    return calls


def first_divergence(ledgers: dict[int, list[Call]], phases: Mapping[int, Phase] | None = None) -> str | None:
    """The first place where ranks' calls disagree, in words; None if their calls are consistent.

    `phases` (each rank's Phase; INITIALISED when absent) names ranks that never initialised or whose
    program has finished, and counts a rank waiting in init_process_group as waiting.
    """
    return _divergence(ledgers, phases or {})[0]


def _divergence(ledgers: dict[int, list[Call]], phases: Mapping[int, Phase]) -> tuple[str | None, str]:
    """The first divergence in words and the advice that fits it ("" when there is none)."""
    import json  # a hang's report alone reads a group's ranks

    entries = dict(sorted(ledgers.items()))
    waiting = {rank: next((e for e in rows if not e.done), None) for rank, rows in entries.items()}
    for rank, entry in waiting.items():
        if entry is None or entry.op not in _P2P or not entry.peer[4:].isdigit():
            continue
        peer = int(entry.peer[4:])
        other = waiting.get(peer)
        wanted = _P2P_SEND if entry.op in _P2P_RECV else _P2P_RECV
        if peer in entries and (other is None or other.op not in wanted or other.peer[4:] != str(rank)):
            if other is not None:
                where, advice = f"rank {peer} is in {other.waiting()}", _PAIRS
            else:
                where, advice = _elsewhere([peer], phases)
            return f"rank {rank} waits in {entry.waiting()} while {where}", advice
    for group in sorted({e.group for rows in entries.values() for e in rows if e.op not in _P2P}):
        members = list(entries) if group == "world" else [r for r in json.loads(group) if r in entries]
        calls = {rank: {e.gseq: e for e in entries[rank] if e.group == group and e.op not in _P2P} for rank in members}
        for gseq in sorted(set.intersection(*(set(by_gseq) for by_gseq in calls.values()))):
            mismatch = _mismatch({rank: by_gseq[gseq] for rank, by_gseq in calls.items()})
            if mismatch:
                return mismatch, _ORDER
    stuck = {rank: e.waiting() for rank, e in waiting.items() if e is not None}
    stuck.update({r: "init_process_group" for r in entries if r not in stuck and _phase(phases, r) == INITIALISING})
    absent = sorted(set(entries) - set(stuck))
    if stuck and absent:
        first_rank = min(stuck)
        by_phase: dict[str, list[int]] = {}
        for rank in absent:
            by_phase.setdefault(_phase(phases, rank), []).append(rank)
        parts = [_elsewhere(ranks, phases) for ranks in by_phase.values()]
        return f"rank {first_rank} waits in {stuck[first_rank]} while {' and '.join(w for w, _ in parts)}", parts[0][1]
    pending = {(e.group, e.gseq, e.op) for e in waiting.values() if e is not None}
    if len(entries) > 1 and len(pending) == 1 and None not in waiting.values() and next(iter(pending))[1]:
        return None, _SLOW
    return None, ""


_PAIRS = "a send or recv whose peer is in another call: check that every send has its recv, in the same order"
_ORDER = (
    "the ranks' calls differ at the same point of the group (operation, shape, dtype or root): every rank of a "
    "group must issue the same collectives in the same order"
)
_SLOW = (
    "every rank is in the same call and still waiting: it is slow, or stuck inside the backend or the network; "
    f"if it is only slow, set a larger {TIMEOUT.name}"
)


def _phase(phases: Mapping[int, Phase], rank: int) -> str:
    """A rank's phase name; INITIALISED when it was not sent (a watchdog started by hpcdist.init)."""
    phase = phases.get(rank)
    return Phase(*phase).name if phase else INITIALISED


def _elsewhere(ranks: list[int], phases: Mapping[int, Phase]) -> tuple[str, str]:
    """What ranks in one phase do instead of communicating, e.g. 'rank 1 finished its program', and the advice."""
    phase, one, who = _phase(phases, ranks[0]), len(ranks) == 1, ranks_text(ranks)
    if phase == FINISHED:
        advice = f"{who} ended without the call the others wait in: check that every rank makes the same calls"
        return f"{who} {'finished its program' if one else 'finished their programs'}", advice
    if phase == RUNNING:
        whose = "its program has" if one else "their programs have"
        advice = f"{who} never reached init_process_group: check that every rank runs the same program"
        return f"{who} never initialised ({whose} not called init_process_group)", advice
    where = "its stack below shows where it is" if one else "their stacks below show where they are"
    advice = (
        f"the other ranks wait for {who}, which {'is' if one else 'are'} busy elsewhere or stuck outside "
        "communication; a larger timeout helps only if that work is meant to take this long"
    )
    return f"{who} {'is' if one else 'are'} not in any communication call ({where})", advice


def _mismatch(calls: dict[int, Call]) -> str | None:
    """'rank 1 is in X while ranks 0,2-3 are in Y' when the i-th collective differs, else None."""
    by_signature: dict[tuple, list[int]] = {}
    for rank, call in calls.items():
        by_signature.setdefault(call.signature(), []).append(rank)
    if len(by_signature) == 1:
        return None
    groups = sorted(by_signature.values(), key=lambda ranks: (len(ranks), ranks))
    parts = [
        f"{ranks_text(ranks)} {'is' if len(ranks) == 1 else 'are'} in {_detail(calls[ranks[0]])}" for ranks in groups
    ]
    return parts[0] + " while " + "; ".join(parts[1:])


def _detail(entry: Call) -> str:
    """A call with its shape and dtype, for a collective mismatch."""
    return f"{entry.label()} shape={list(entry.shape)} dtype={entry.dtype} on group {entry.group}"


def _state(entries: list[Call], phase: Phase | None) -> tuple[str, float | None, str]:
    """What one rank was doing, as (text before its age, the age in seconds or None, text after it)."""
    pending = next((e for e in entries if not e.done), None)
    last = f"last call {entries[-1].label()}" if entries else "no communication call"
    phase = Phase(*phase) if phase is not None else Phase(INITIALISED, 0.0)
    if pending:
        return f"waiting in {_detail(pending)} for ", pending.age, f" s{', ' + pending.note if pending.note else ''}"
    if phase.name == INITIALISING:
        return "waiting in init_process_group for ", phase.age, " s"
    if phase.name == RUNNING:
        return "running its program, which has not called init_process_group", None, ""
    if phase.name == FINISHED:
        return "finished its program ", phase.age, f" s ago; {last}"
    return f"not communicating; last call {entries[-1].label() if entries else 'none'}", None, ""


def describe_hang(ledgers: dict[int, list[Call]], missing: list[int], phases: Mapping[int, Phase] | None = None) -> str:
    """The full report: each rank's pending call or phase, the first divergence, and ranks that did not answer.

    Past LISTED ranks, ranks in the same state share a line (`ranks 0,2-9999: waiting in all_reduce #2 … for
    5.0-5.3 s`), the first LISTED states shown and the others' ranks counted, so the report stays a page at any N.
    """
    phases = phases or {}
    lines = ["hpcdist: communication hang — what each rank was doing:"]
    states = {rank: _state(rows, phases.get(rank)) for rank, rows in sorted(ledgers.items())}
    lost = "did not answer (dead, stuck outside Python, or a program that never imported torch)"
    if len(states) + len(missing) <= LISTED:
        for rank, (head, age, tail) in states.items():
            lines.append(f"  rank {rank}: {head}{'' if age is None else f'{age:.1f}'}{tail}")
        lines += [f"  rank {rank}: {lost}" for rank in missing]
    else:
        groups: dict[tuple[str, str], list[int]] = {}
        for rank, (head, _, tail) in states.items():
            groups.setdefault((head, tail), []).append(rank)
        ordered = sorted(groups.items(), key=lambda item: (len(item[1]), item[1]))  # the rank apart first
        for (head, tail), ranks in ordered[:LISTED]:
            ages = [age for rank in ranks if (age := states[rank][1]) is not None]
            span = f"{min(ages):.1f}" + (f"-{max(ages):.1f}" if max(ages) > min(ages) else "") if ages else ""
            lines.append(f"  {ranks_text(ranks)}: {head}{span}{tail}")
        rest = ordered[LISTED:]
        if rest:
            lines.append(f"  {ranks_text([r for _, ranks in rest for r in ranks])}: {len(rest)} more states, not shown")
        if missing:
            lines.append(f"  {ranks_text(missing)}: {lost}")
    divergence, advice = _divergence(ledgers, phases)
    if missing and advice == _SLOW:  # the ranks that did not answer may be elsewhere
        advice = ""
    lines.append(f"first divergence: {divergence}" if divergence else "no divergence found in the recorded calls")
    if advice:
        lines.append(f"advice: {advice}")
    return "\n".join(lines)
