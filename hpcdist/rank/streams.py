"""A rank's output as the tagger writes it and `hpcdist mpirun` reads it: the variables, rank lists, lines (pure).

The shim's tagger (`rank.tagger`) runs when HPCDIST_TAG, HPCDIST_LOG_DIR or HPCDIST_RANKS is set and writes each whole
line as `[host:rank] text`; the supervisor's router (`launching.output`) splits the same lines back. For that router
the tagger numbers them, `[host:rank:N] text`: a rank's stdout and stderr reach it through two pipes of mpirun in
either order, and N puts the rank's last lines back in the order the rank wrote them.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import UsageError
from ..values import MAX_COUNT

__all__ = [
    "LOG_DIR_ENV",
    "NUMBERED",
    "RANKS_ENV",
    "TAG_ENV",
    "Tagged",
    "log_name",
    "parse_ranks",
    "split_segments",
    "split_tag",
]

TAG_ENV = "HPCDIST_TAG"  # 1: prefix each line with [host:rank]; 0: not (the log dir and rank filter still apply)
NUMBERED = "numbered"  # HPCDIST_TAG's value when hpcdist mpirun routes the lines: [host:rank:N], N from 1 per rank
LOG_DIR_ENV = "HPCDIST_LOG_DIR"  # each rank also writes its lines to DIR/rank-NNN.log
RANKS_ENV = "HPCDIST_RANKS"  # only these ranks' lines reach the console (e.g. 0,3 or 0-3,7)
_TAG = re.compile(rb"\[(?P<host>[^\s:\[\]]+):(?P<rank>[0-9]{1,10})(?::(?P<number>[0-9]{1,20}))?\] ")
_SEGMENT_END = re.compile(rb"\r\n|\n|\r(?!\Z)")  # a lone \r last may still be a \r\n: wait for the next byte


def parse_ranks(text: str, np: int | None = None, what: str = "--ranks") -> frozenset[int]:
    """The ranks of a list such as `0,3` or `0-3,7`; each must be below `np` when it is known.

    Raises:
        UsageError: not such a list, a range that runs backwards, or a rank the job does not have.
    """
    ranks: set[int] = set()
    for item in text.split(","):
        match = re.fullmatch(r"\s*([0-9]{1,10})\s*(?:-\s*([0-9]{1,10})\s*)?", item)
        if match is None:
            raise UsageError(f"{what} {text!r}: {item.strip()!r} is not a rank or a range; use e.g. 0,3 or 0-3,7")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise UsageError(f"{what} {text!r}: the range {item.strip()!r} runs backwards; write it as {last}-{first}")
        bound = np if np is not None else MAX_COUNT
        if last >= bound:
            raise UsageError(
                f"{what} {text!r}: rank {last} does not exist in a job of {bound} ranks (ranks count from 0); "
                f"give ranks from 0 to {bound - 1}"
            )
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


def log_name(rank: int, size: int) -> str:
    """`rank-003.log`: the rank zero-padded to the width of the largest rank, at least three digits."""
    return f"rank-{rank:0{max(3, len(str(max(size - 1, 0))))}d}.log"


def split_segments(data: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The whole segments of `data`, each with how it ended, and the rest that is not whole yet.

    A segment ends with b"\n" (a line; `\r\n` counts as one) or b"\r" (a progress bar drawing itself again
    on the same line, as tqdm does), so a redrawn bar is passed on at once rather than at its last newline.
    """
    segments, start = [], 0
    for match in _SEGMENT_END.finditer(data):
        segments.append((data[start : match.start()], b"\r" if match.group() == b"\r" else b"\n"))
        start = match.end()
    return segments, data[start:]


class Tagged(NamedTuple):
    """A tagged line taken apart: its host and rank, its number among the rank's lines (None: not numbered), text."""

    host: str
    rank: int
    number: int | None
    text: bytes


def split_tag(line: bytes) -> Tagged | None:
    """A tagged line `[host:rank] text` (or `[host:rank:N] text`) taken apart, or None for an untagged one."""
    match = _TAG.match(line)
    if match is None:
        return None
    number = int(match["number"]) if match["number"] else None
    return Tagged(match["host"].decode(errors="replace"), int(match["rank"]), number, line[match.end() :])
