"""A rank's output as the tagger reads it and `hpcdist mpirun` routes it: rank lists and line segments (pure).

The shim's tagger (`rank.tagger`) runs when the launch's contract asks for tags, a log directory or a rank filter,
and writes each whole line tagged (the tag's format is the contract's: `contract.tag`, `contract.split_tag`).
"""

from __future__ import annotations

import re

from ..contract import RankContract
from ..errors import UsageError
from ..values import MAX_COUNT

__all__ = ["LOG_DIR_ENV", "RANKS_ENV", "TAG_ENV", "parse_ranks", "split_segments"]

# The contract's variables as the supervisor's router (launching.output) and a job's files (jobs.slurmjob) name them
TAG_ENV = RankContract.variable("tag")
LOG_DIR_ENV = RankContract.variable("log_dir")
RANKS_ENV = RankContract.variable("ranks")
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
