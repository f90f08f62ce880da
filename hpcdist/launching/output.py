"""Per-rank output (pure): the options, the shim's variables, rank lists, and the router of mpirun's lines.

A rank started through hpcdist's shim with HPCDIST_TAG, HPCDIST_LOG_DIR or HPCDIST_RANKS set runs a tagger
(`tagger.py`) that writes each whole line as `[host:rank] text`. `hpcdist mpirun` reads those lines back here:
it shows the selected ranks and keeps each rank's last lines for the failure summary (monitor.py has taken
the control lines out before).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import UsageError
from ..values import MAX_COUNT
from .monitor import MpirunWatch

__all__ = [
    "DEFAULT_TAIL",
    "LOG_DIR_ENV",
    "RANKS_ENV",
    "TAG_ENV",
    "Console",
    "Failure",
    "OutputOptions",
    "OutputRouter",
    "log_name",
    "parse_ranks",
    "shim_variables",
    "split_segments",
    "split_tag",
    "summary",
]

TAG_ENV = "HPCDIST_TAG"  # 1: prefix each line with [host:rank]; 0: not (the log dir and rank filter still apply)
LOG_DIR_ENV = "HPCDIST_LOG_DIR"  # each rank also writes its lines to DIR/rank-NNN.log
RANKS_ENV = "HPCDIST_RANKS"  # only these ranks' lines reach the console (e.g. 0,3 or 0-3,7)
DEFAULT_TAIL = 20
_TAG = re.compile(rb"\[(?P<host>[^\s:\[\]]+):(?P<rank>[0-9]{1,10})\] ")
_SEGMENT_END = re.compile(rb"\r\n|\n|\r(?!\Z)")  # a lone \r last may still be a \r\n: wait for the next byte


@dataclass(frozen=True)
class OutputOptions:
    """What `hpcdist mpirun --[no-]tag/--log-dir/--ranks/--tail` (`hpcdist sbatch --tag/--log-dir/--ranks`) ask for."""

    tag: bool = True  # hpcdist mpirun: by default when its output is a terminal
    log_dir: str | None = None
    ranks: str | None = None  # the rank list as given, e.g. "0,3" or "0-3,7"; None: every rank
    tail: int = DEFAULT_TAIL


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


def shim_variables(options: OutputOptions, routed: bool = False) -> list[str]:
    """The `NAME=VALUE` settings that make the shim's tagger do what `options` ask (none: it does not start).

    With `routed` (a launch `hpcdist mpirun` runs itself), ranks always tag and send every line: the launcher
    filters and strips them itself, so it still has a hidden rank's last lines when that rank fails.
    """
    settings = [f"{TAG_ENV}=1"] if options.tag or routed else []
    if options.log_dir:
        settings.append(f"{LOG_DIR_ENV}={options.log_dir}")
    if options.ranks is not None and not routed:
        settings.append(f"{RANKS_ENV}={options.ranks}")
    return settings


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


def split_tag(line: bytes) -> tuple[str, int, bytes] | None:
    """(host, rank, text) of a tagged line `[host:rank] text`, or None for an untagged one."""
    match = _TAG.match(line)
    if match is None:
        return None
    return match["host"].decode(errors="replace"), int(match["rank"]), line[match.end() :]


@dataclass(frozen=True)
class Failure:
    """A rank that failed: where, how, and its last lines (tagged as they were shown)."""

    rank: int
    host: str
    how: str
    tail: tuple[bytes, ...]


@dataclass
class _Rank:
    """What the router keeps of one rank: its host and last lines."""

    host: str = "?"
    lines: deque[bytes] = field(default_factory=deque)


class OutputRouter:
    """Fed mpirun's output (control lines already taken out) in chunks; returns what to show and keeps tails."""

    def __init__(self, options: OutputOptions, np: int | None = None) -> None:
        self.options = options
        self.shown = None if options.ranks is None else parse_ranks(options.ranks, np)
        self._ranks: dict[int, _Rank] = {}
        self._partial: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def feed(self, stream: str, chunk: bytes) -> bytes:
        """The part of `chunk` (from mpirun's `stream`) to show now; a partial last line waits for more."""
        with self._lock:
            segments, self._partial[stream] = split_segments(self._partial.get(stream, b"") + chunk)
            return b"".join(self._route(text + end) for text, end in segments)

    def finish(self, stream: str) -> bytes:
        """What is left of `stream` once mpirun has ended (a last line without a newline), to show."""
        with self._lock:
            rest = self._partial.pop(stream, b"")
            return self._route(rest) if rest.strip(b"\0 \t\r") else b""  # PRRTE ends a banner with a NUL

    def _route(self, line: bytes) -> bytes:
        """One line (or a progress bar's redraw, ending in \\r): keep a rank's line for its tail; what to show."""
        line = line.lstrip(b"\0")  # PRRTE ends a banner with a NUL, after its newline: the next line starts with it
        tagged = split_tag(line)
        if tagged is None:
            return line  # mpirun's own
        host, rank, rest = tagged
        kept = self._ranks.setdefault(rank, _Rank(host, deque(maxlen=self.options.tail)))
        kept.host = host
        shown = line if self.options.tag else rest
        if not line.endswith(b"\r"):  # a bar's redraws are not lines of the tail
            kept.lines.append(shown)
        return shown if self.shown is None or rank in self.shown else b""

    def failures(self, failed: Mapping[int, str], hosts: Mapping[int, str]) -> list[Failure]:
        """The failed ranks (rank -> how, in the order heard; their hosts where known), each with its last lines."""
        with self._lock:
            result = []
            for rank, how in failed.items():
                kept = self._ranks.get(rank, _Rank())
                result.append(Failure(rank, hosts.get(rank) or kept.host, how, tuple(kept.lines)))
            return result


class Console:
    """mpirun's output on its way to ours: the watch takes control lines out and notes failures, the router routes."""

    def __init__(self, watch: MpirunWatch, router: OutputRouter | None) -> None:
        self.watch, self.router = watch, router
        self._partial: dict[str, bytes] = {}

    def feed(self, stream: str, chunk: bytes) -> bytes:
        """What to show of a chunk of mpirun's `stream`; b"" (its end) gives back what was held.

        With a router (tagged lines), the watch sees whole lines (and a progress bar's `\\r` redraws) only, so a
        control line with a tag before it is taken out whole however mpirun's output was cut into chunks.
        """
        if self.router is None:
            return self.watch.feed(stream, chunk)
        data = self._partial.pop(stream, b"") + chunk
        if chunk:
            cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1  # whole lines, and a progress bar's redraws
            data, self._partial[stream] = data[:cut], data[cut:]
        shown = self.watch.feed(stream, data) if data else b""
        if not chunk:
            shown += self.watch.feed(stream, b"")
        routed = self.router.feed(stream, shown) if shown else b""
        return routed if chunk else routed + self.router.finish(stream)

    def failures(self, returncode: int = 1) -> list[Failure]:
        """The ranks that failed (see MpirunWatch.named), each with its last lines (none without a router)."""
        if self.router is None:
            return []
        return self.router.failures(self.watch.named(returncode), self.watch.hosts)


def summary(failures: list[Failure], tail: int) -> str:
    """The failure summary: for each failed rank a header naming it, then its last `tail` lines."""
    parts = []
    for failure in failures:
        lines = failure.tail[-tail:] if tail else ()
        head = f"hpcdist: rank {failure.rank} on {failure.host} failed ({failure.how})"
        if not lines:
            parts.append(f"{head}{'; it printed nothing' if tail else ''}\n")
            continue
        body = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
        count = "its last line" if len(lines) == 1 else f"its last {len(lines)} lines"
        parts.append(f"{head}; {count}:\n" + body.decode(errors="replace"))
    return "".join(parts)
