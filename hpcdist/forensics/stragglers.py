"""Stragglers in a merged timeline: per rank, time in collectives against time between them, and who arrived last.

The same collective on different ranks is the one with the same group and per-group sequence number. A rank
arrived last at it when its start is the latest on the aligned clock and its own gap (the time since its
previous call ended) is longer than every other's: it was late by its own work, not because the previous call
let it go last (at a rank's first call, whose gap is not known, arriving last is enough). Its lateness is how
long after the next-latest rank it came. A rank is named the straggler when it arrived last at no fewer than
STRAGGLER_SHARE of at least MIN_COMPARED collectives, and its mean lateness there is above both twice the
clocks' residual bound (two ranks' clocks may disagree by that much) and MIN_LATENESS (below it, the
scheduler's noise decides who is last). Pure.
"""

from __future__ import annotations

import json

from ..commcall import Call
from ..records import record
from .chrome import Trace

__all__ = ["MIN_COMPARED", "MIN_LATENESS", "STRAGGLER_SHARE", "RankRow", "Summary", "format_summary", "summarize"]

STRAGGLER_SHARE = 2 / 3
MIN_COMPARED = 10
MIN_LATENESS = 100e-6  # seconds


@record(frozen=True)
class RankRow:
    """One rank's line of the table."""

    rank: int
    host: str
    collectives: int
    in_collectives: float  # seconds inside collectives whose end is known
    between: float  # seconds from its first collective's start to its last one's end, outside them
    compared: int  # collectives it shared with every other member of their group
    last: int  # of those, how many it arrived at last, after the longest gap
    lateness: float  # mean seconds it came after the next-latest rank, where it was last (0.0 if never)


@record(frozen=True)
class Summary:
    """The table's rows, the straggler (None when no rank stands out), and the clocks' residual bound."""

    rows: tuple[RankRow, ...]
    straggler: int | None
    residual: float


def summarize(trace: Trace) -> Summary:
    """Each rank's row and the straggler by the rule above."""
    members = [r.rank for r in trace.ranks]
    by_key: dict[tuple[str, int], dict[int, Call]] = {}
    gaps: dict[tuple[int, int], float | None] = {}  # (rank, seq) -> seconds since its previous call ended
    for rank in trace.ranks:
        previous = None  # before a rank's first call, its gap is not known
        for call in rank.calls:
            if call.gseq:
                by_key.setdefault((call.group, call.gseq), {})[rank.rank] = call
            gaps[rank.rank, call.seq] = None if previous is None else call.started - previous
            previous = call.ended if call.ended is not None else call.started
    compared = dict.fromkeys(members, 0)
    last = dict.fromkeys(members, 0)
    late = dict.fromkeys(members, 0.0)
    for (group, _), calls in by_key.items():
        expected = members if group == "world" else json.loads(group)
        if len(calls) < 2 or sorted(calls) != sorted(expected):
            continue  # a collective some member's buffer no longer holds (or never recorded) is not compared
        order = sorted(calls, key=lambda r: calls[r].started)
        for member in order:
            compared[member] += 1
        latest, gap = order[-1], gaps[order[-1], calls[order[-1]].seq]
        others = [gaps[r, calls[r].seq] for r in order[:-1]]
        if gap is None or None in others or gap > max(g for g in others if g is not None):
            last[latest] += 1
            late[latest] += calls[latest].started - calls[order[-2]].started
    rows = tuple(_row(rank.rank, rank.host, rank.calls, compared, last, late) for rank in trace.ranks)
    floor = max(2 * trace.residual, MIN_LATENESS)
    named = [
        row.rank
        for row in rows
        if row.compared >= MIN_COMPARED and row.last >= STRAGGLER_SHARE * row.compared and row.lateness > floor
    ]
    return Summary(rows, named[0] if named else None, trace.residual)


def _row(
    rank: int,
    host: str,
    calls: tuple[Call, ...],
    compared: dict[int, int],
    last: dict[int, int],
    late: dict[int, float],
) -> RankRow:
    """A rank's row from its collectives and the counts over all ranks."""
    collectives = [c for c in calls if c.gseq]
    inside = sum(c.ended - c.started for c in collectives if c.ended is not None)
    span = max((c.ended or c.started) for c in collectives) - collectives[0].started if collectives else 0.0
    mean = late[rank] / last[rank] if last[rank] else 0.0
    return RankRow(rank, host, len(collectives), inside, max(span - inside, 0.0), compared[rank], last[rank], mean)


def format_summary(summary: Summary) -> list[str]:
    """The table, then the line naming the straggler or saying that no rank stands out."""
    header = ("rank", "host", "collectives", "in collectives", "between", "arrived last", "mean lateness")
    table = [header] + [
        (
            str(r.rank),
            r.host,
            str(r.collectives),
            _seconds(r.in_collectives),
            _seconds(r.between),
            f"{r.last}/{r.compared}",
            _seconds(r.lateness) if r.last else "-",
        )
        for r in summary.rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    bound = f"clocks aligned within {_seconds(summary.residual)}"
    if summary.straggler is None:
        lines.append(
            f"straggler: none (no rank arrived last at 2/3 of 10 or more collectives, late by more than "
            f"{_seconds(max(2 * summary.residual, MIN_LATENESS))} on average; {bound})"
        )
    else:
        row = summary.rows[[r.rank for r in summary.rows].index(summary.straggler)]
        lines.append(
            f"straggler: rank {row.rank} on {row.host} (arrived last at {row.last} of {row.compared} collectives, "
            f"{_seconds(row.lateness)} after the next rank on average; {bound})"
        )
    return lines


def _seconds(value: float) -> str:
    """A duration in the unit that fits: 12.3 s, 45.6 ms or 78 us."""
    if value >= 1:
        return f"{value:.1f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} us"
