"""The hang report's first round: each rank's digest, a host's summary of them, the reporter's tally (pure).

So that the reporting rank's intake grows with hosts, not ranks, every rank first sends a digest of a few tens of
bytes (`digest`): a key of its recorded calls without their times and of its phase (`key`), its phase, and the age
the report shows for it. Two ranks with equal keys print the same line in the report and weigh alike in the
shrink verdict: the key covers every field of every call that the divergence analysis, the verdict and the report
read (operation, peer, shape, dtype, group and its count, the call's number, whether it ended, whether autograd
issued it), and nothing else. A host's leader merges its ranks' digests into one summary (`merge`); the reporter
adds up the hosts' summaries (`Tally`), asks a few ranks of each state for their full answer (`Tally.chosen`) and
gives every other rank the calls of one in its state, with its own age (`Tally.filled`).

Which ranks share a host (`place`, `hosts`) only decides how many messages go where, never what the report says:
a rank that no leader covers, or two do, is asked for its digest directly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..commcall import Call
from ..records import field, record
from .frdump import PART
from .ledger import Phase

__all__ = ["Digest", "Intake", "State", "Tally", "digest", "fan_in", "hosts", "key", "merge", "place", "sent"]

FULL_FIRST, FULL_LAST = 2, 1  # the ranks of each state asked for their full answer: its first two and its last


class Digest(NamedTuple):
    """What a rank sends in the first round: the key of its state, its phase's name, the age its report line shows."""

    key: int
    phase: str
    age: float


class State(NamedTuple):
    """The ranks of one host in one state: their ranks, their phase's name, their youngest and oldest ages."""

    ranks: tuple[int, ...]
    phase: str
    ages: tuple[float, float]


Summary = dict[int, State]  # a host's ranks by the key of their state: what its leader sends


def key(calls: Sequence[Call], phase: str) -> int:
    """The state of a rank's calls and phase, times left out, as 64 bits: equal for ranks whose report lines and
    verdicts are alike."""
    import hashlib  # a hang's report alone keys a rank's calls

    fields = [(c.op, c.peer, tuple(c.shape), str(c.dtype), c.group, c.gseq, c.seq, c.done, c.backward) for c in calls]
    return int.from_bytes(hashlib.blake2b(repr((phase, fields)).encode(), digest_size=8).digest(), "big")


def digest(calls: Sequence[Call], phase: Phase) -> Digest:
    """A rank's digest from its answer's calls (ages relative to now) and phase: the age is its pending call's, else
    its phase's (the one the report shows)."""
    pending = next((call for call in calls if not call.done), None)
    return Digest(key(calls, phase.name), phase.name, pending.age if pending is not None else phase.age)


def merge(digests: Mapping[int, Digest]) -> Summary:
    """A host's digests (rank -> digest) as its leader sends them: one State per key."""
    ranks: dict[int, list[int]] = {}
    for rank in sorted(digests):
        ranks.setdefault(digests[rank].key, []).append(rank)
    summary: Summary = {}
    for state, members in ranks.items():
        ages = [digests[rank].age for rank in members]
        summary[state] = State(tuple(members), digests[members[0]].phase, (min(ages), max(ages)))
    return summary


def place(environ: Mapping[str, str], rank: int, size: int) -> list[int]:
    """The ranks of this rank's host as the default placement puts them: its local rank's consecutive neighbours,
    from torch's LOCAL_RANK and LOCAL_WORLD_SIZE (the bootstrap writes them from the launch); [rank] without them."""
    try:
        local, local_size = int(environ["LOCAL_RANK"]), int(environ["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return [rank]
    first = rank - local
    if not 0 <= local < local_size or first < 0:
        return [rank]
    return list(range(first, min(first + local_size, size)))


def hosts(
    registered: Mapping[int, Sequence[int]], size: int, reporter: int, lost: set[int]
) -> tuple[dict[int, list[int]], list[int]]:
    """Who gathers whose digests: leader -> the other live ranks it asks, and the ranks the reporter asks directly.

    `registered`: leader -> the ranks it said it leads. A registration is trusted when its ranks are in range and no
    other registration names them; the lowest live rank of each leads (under the reporter's own host, the lowest
    other one). Every rank that no trusted registration covers is asked directly.
    """
    count: dict[int, int] = {}
    for ranks in registered.values():
        for rank in set(ranks):
            count[rank] = count.get(rank, 0) + 1
    groups: dict[int, list[int]] = {}
    covered: set[int] = {reporter}
    for ranks in registered.values():
        members = sorted(set(ranks))
        if not members or not all(0 <= rank < size and count[rank] == 1 for rank in members):
            continue
        live = [rank for rank in members if rank not in lost and rank != reporter]
        covered.update(members)
        if len(live) > 1:
            groups[live[0]] = live[1:]
        elif live:
            covered.discard(live[0])  # a host of one: asked directly
    return groups, [rank for rank in range(size) if rank not in covered and rank not in lost]


@record
class Tally:
    """The reporter's sum of the first round: each state's phase and ranks, and every rank's age."""

    states: dict[int, tuple[str, list[int]]] = field(default_factory=dict)  # key -> (phase, ranks)
    ages: dict[int, float] = field(default_factory=dict)  # rank -> the age its report line shows
    keys: dict[int, int] = field(default_factory=dict)  # rank -> the key of its state

    def add(self, summary: Mapping[int, tuple[Any, ...]]) -> None:
        """One host's summary (or one rank's digest, `merge`d); ranks already heard from keep what they said.

        Each rank is given its host's youngest age, the host's last rank in the state its oldest, so that a state's
        range over every rank is the true one."""
        for state, (ranks, phase, (young, old)) in summary.items():
            fresh = [rank for rank in ranks if rank not in self.keys]
            if not fresh:
                continue
            self.states.setdefault(state, (phase, []))[1].extend(fresh)
            for rank in fresh:
                self.ages[rank], self.keys[rank] = young, state
            self.ages[fresh[-1]] = old

    def chosen(self) -> list[int]:
        """The ranks asked for their full answer: the first FULL_FIRST and the last FULL_LAST of each state."""
        picked: set[int] = set()
        for _, ranks in self.states.values():
            ordered = sorted(ranks)
            picked.update(ordered[:FULL_FIRST] + ordered[-FULL_LAST:])
        return sorted(picked)

    def filled(self, full: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Every rank's answer: its full one, else the calls of the first rank of its state that answered in full,
        with its own phase and age, and no stacks; a state with no full answer is left out (its ranks are missing)."""
        answers = dict(full)
        for phase, ranks in self.states.values():
            model = next((full[rank] for rank in sorted(ranks) if rank in full), None)
            if model is None:
                continue
            part = {name: value for name, value in (model.get(PART) or {}).items() if name != "torch_dump"}
            for rank in ranks:
                if rank not in answers:
                    age = self.ages[rank]
                    answers[rank] = {"phase": Phase(phase, age), "ledger": _aged(model["ledger"], age), PART: part}
        return answers


def _aged(calls: list[Call], age: float) -> list[Call]:
    """A representative's calls with its pending call (if any) replaced by a copy of `age` seconds; the rest shared."""
    index = next((i for i, call in enumerate(calls) if not call.done), None)
    if index is None:
        return calls
    pending = calls[index].moved(0.0)
    pending.started = -age
    return [*calls[:index], pending, *calls[index + 1 :]]


@record
class Intake:
    """What the reporting rank received for one report: messages and bytes, by kind ('host summary')."""

    messages: int = 0
    bytes: int = 0
    kinds: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (messages, bytes)

    def count(self, kind: str, size: int) -> None:
        """One message of `kind` and `size` bytes."""
        self.messages += 1
        self.bytes += size
        number, total = self.kinds.get(kind, (0, 0))
        self.kinds[kind] = (number + 1, total + size)

    def __str__(self) -> str:
        """'10 messages (2,345 bytes): 3 full answers (1,800 bytes), 1 host summary (87 bytes), …'."""
        kinds = ", ".join(
            f"{number} {_plural(kind, number)} ({total:,} bytes)"
            for kind, (number, total) in sorted(self.kinds.items())
        )
        return f"{self.messages} messages ({self.bytes:,} bytes){': ' + kinds if kinds else ''}"


def _plural(kind: str, number: int) -> str:
    """'host summary' as `number` of them are called: 'host summaries', or itself for one."""
    if number == 1:
        return kind
    return kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def sent(summary: Summary) -> dict[int, tuple[Any, ...]]:
    """A summary as its leader sends it: plain tuples, which pickle smaller than named ones."""
    return {state: tuple(ranks) for state, ranks in summary.items()}


def fan_in(ranks: int, per_host: int, states: int = 1, direct: bool = False, repeats: int = 5) -> tuple[float, Tally]:
    """The reporter's CPU seconds per rank to take `ranks` ranks' first round (unpickled and added up, the ranks to
    ask in full chosen; the median of `repeats`), and the tally: as one summary per host of `per_host` ranks, or
    with `direct` one digest per rank; `states` distinct states, rank r in state r % states."""
    import pickle
    import statistics

    digests = {rank: Digest(rank % states, "initialised", 5.0 + (rank % 7) / 10) for rank in range(ranks)}
    if direct:
        messages = [pickle.dumps((0, tuple(one))) for one in digests.values()]
    else:
        firsts = range(0, ranks, per_host)
        summaries = [merge({r: digests[r] for r in range(first, min(first + per_host, ranks))}) for first in firsts]
        messages = [pickle.dumps((0, sent(summary), [])) for summary in summaries]
    times: list[float] = []
    for _ in range(repeats):
        tally = Tally()
        began = time.process_time()
        for rank, message in enumerate(messages):
            taken = pickle.loads(message)
            tally.add(merge({rank: Digest(*taken[1])}) if direct else taken[1])
        tally.chosen()
        times.append(time.process_time() - began)
    return statistics.median(times) / ranks, tally
