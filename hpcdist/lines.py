"""The tagged line: `[host:rank] text` (`[host:rank:N] text` for the launcher's router), written by the rank's tagger
and split again by the launcher (a leaf).

`tag` and `split_tag` write and take apart a line's tag, `split_segments` cuts a stream into whole lines and
progress-bar redraws, and `log_name` names each rank's log file.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Tagged", "log_name", "split_segments", "split_tag", "tag"]

_SEGMENT_END = re.compile(rb"\r\n|\n|\r(?!\Z)")  # a lone \r last may still be a \r\n: wait for the next byte
_TAG = re.compile(rb"\[(?P<host>[^\s:\[\]]+):(?P<rank>[0-9]{1,10})(?::(?P<number>[0-9]{1,20}))?\] ")


class Tagged(NamedTuple):
    """A tagged line taken apart: its host and rank, its number among the rank's lines (None: not numbered), text."""

    host: str
    rank: int
    number: int | None
    text: bytes


def tag(host: str, rank: int, number: int | None = None) -> bytes:
    """The tag a rank's line starts with: `[host:rank] ` (`[host:rank:N] ` numbered)."""
    return f"[{host}:{rank}{'' if number is None else f':{number}'}] ".encode()


def split_tag(line: bytes) -> Tagged | None:
    """A tagged line `[host:rank] text` (or `[host:rank:N] text`) taken apart, or None for an untagged one."""
    match = _TAG.match(line)
    if match is None:
        return None
    number = int(match["number"]) if match["number"] else None
    return Tagged(match["host"].decode(errors="replace"), int(match["rank"]), number, line[match.end() :])


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
