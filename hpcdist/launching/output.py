"""Per-rank output (pure): the options, and the router of mpirun's lines.

A rank whose contract asks for tagged lines, a log directory or a rank list runs a tagger (`rank.tagger`) that
writes each whole line as `[host:rank] text` (`[host:rank:N] text` when `hpcdist mpirun` routes them; the line's
format is the contract's). `hpcdist mpirun` reads those lines back here: it shows
the selected ranks and keeps each rank's last lines for the failure summary, in the order the rank wrote them
(watch.py has taken the event lines out before). What of the launcher's and the MPI's own words hpcdist's report
replaces, the launch's MPI family says (`hpcdist.families`).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Collection, Mapping

from .. import families, settings
from ..lines import split_segments, split_tag
from ..ranklist import by_host
from ..records import field, record
from ..values import parse_ranks
from .outcome import BLAMED_HOWS
from .watch import MpirunWatch

__all__ = [
    "DEFAULT_TAIL",
    "Console",
    "Failure",
    "OutputOptions",
    "OutputRouter",
    "shows_banners",
    "summary",
]

DEFAULT_TAIL = 20
MOST_SUMMARIES = 8  # failed ranks shown with their last lines; the rest are grouped and counted


@record(frozen=True)
class OutputOptions:
    """What `hpcdist mpirun --[no-]tag/--log-dir/--ranks/--tail` (`hpcdist sbatch --tag/--log-dir/--ranks`) ask for."""

    tag: bool = True  # hpcdist mpirun: by default when its output is a terminal
    log_dir: str | None = None
    ranks: str | None = None  # the rank list as given, e.g. "0,3" or "0-3,7"; None: every rank
    tail: int = DEFAULT_TAIL


def shows_banners(environ: Mapping[str, str]) -> bool:
    """Whether the DEBUG setting asks to see the launcher's failure banners, which hpcdist's own lines replace."""
    return settings.debug(environ)


@record(frozen=True)
class Failure:
    """A rank that failed: where, how, and its last lines (tagged as they were shown)."""

    rank: int
    host: str
    how: str
    tail: tuple[bytes, ...]
    seen: bool = False  # each of its lines was shown on the console as it came: the summary does not repeat them


@record
class _Rank:
    """What the router keeps of one rank: its host and last lines."""

    host: str = "an unknown host"
    lines: list[tuple[int, bytes]] = field(default_factory=list)  # a heap of (number, line): the highest numbers
    arrived: int = 0  # the lines that came, which number the lines of a tagger that does not
    in_fatal: bool = False  # within its MPI's report of an error that ends this rank (Family.in_fatal_report)
    unseen: bool = False  # a line of its was kept but not shown (--ranks left it out)
    hid: bool = False  # its last line was one its MPI's report replaces (Family.hides): a blank one after goes too

    def keep(self, number: int | None, line: bytes, most: int) -> None:
        """Keep `line` if it is among the `most` highest numbered (unnumbered: the `most` last to come)."""
        self.arrived += 1
        entry = (self.arrived if number is None else number, line)
        if len(self.lines) < most:
            heapq.heappush(self.lines, entry)
        elif most:
            heapq.heappushpop(self.lines, entry)

    def tail(self) -> tuple[bytes, ...]:
        """The lines kept, in the order the rank wrote them."""
        return tuple(line for _, line in sorted(self.lines))


class OutputRouter:
    """Fed mpirun's output (control lines already taken out) in chunks; returns what to show and keeps tails.

    With `hide_banners`, the banners about a failed rank that the launch's `family` reads as such (Open MPI's help
    blocks that say a rank failed, MPICH's `Abort(N) on node …` lines) are left out: hpcdist names the rank itself,
    in the failure summary or (`caller_reports`, hpcdist.launch) the error it raises. Every other help block is
    shown whole.
    """

    def __init__(self, options: OutputOptions, np: int | None = None, hide_banners: bool = True) -> None:
        self.options = options
        self.shown = None if options.ranks is None else parse_ranks(options.ranks, np)
        self._ranks: dict[int, _Rank] = {}
        self._partial: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.launcher_quiet = False  # set once the user interrupted the job: mpirun's own words are not shown
        self.hide_banners = hide_banners
        self.caller_reports = False  # set by a caller that reports failures itself: no failure summary
        self.family = families.listening(None)  # the launch's MPI family (Console sets the watch's)
        self.failed: Collection[int] = ()  # the ranks heard to fail so far: another's fatal-error report follows
        self.casualties: Collection[int] = ()  # those of them that failed after a peer's loss (a consequence)
        self.usage: Collection[int] = ()  # the ranks that told a usage error: the job's one story, every other
        # rank's fatal-error report its consequence (a peer's closed socket), even from a rank also heard to fail
        self._block: dict[str, list[bytes]] = {}  # per stream, the help block being read (its lines so far)
        self._blank: dict[str, bytes] = {}  # per stream, a blank line of mpirun's held until the next line
        # (rank, stream, line) of a fatal-error report: shown at the end if it is the rank's own story by then, not the
        # consequence of another rank's failure (the rank's log keeps it)
        self._held: list[tuple[int, str, bytes]] = []
        self._report: dict[str, list[bytes]] = {}  # per stream, an untagged fatal-error report being read

    def feed(self, stream: str, chunk: bytes) -> bytes:
        """The part of `chunk` (from mpirun's `stream`) to show now; a partial last line waits for more."""
        with self._lock:
            segments, self._partial[stream] = split_segments(self._partial.get(stream, b"") + chunk)
            return b"".join(self._route(text + end, stream) for text, end in segments)

    def finish(self, stream: str) -> bytes:
        """What is left of `stream` once mpirun has ended (a last line without a newline), to show."""
        with self._lock:
            rest = self._partial.pop(stream, b"")
            last = self._route(rest, stream) if rest.strip(b"\0 \t\r") else b""  # PRRTE ends a banner with a NUL
            self._settle(stream)
            unfinished = [self._blank.pop(stream, b""), *self._block.pop(stream, [])]  # shown as they came
            held = [line for rank, where, line in self._held if where == stream and self._own_story(rank)]
            return b"".join(held) + last + (b"" if self.launcher_quiet else b"".join(unfinished))

    def _own_story(self, rank: int) -> bool:
        """Whether `rank`'s fatal-error report is told: no failure heard but casualties', or its own (not another's
        consequence)."""
        if self.usage:
            return rank in self.usage
        causes = [failed for failed in self.failed if failed not in self.casualties]
        return not causes or rank in causes

    def _route(self, line: bytes, stream: str) -> bytes:
        """One line (or a progress bar's redraw, ending in \\r): keep a rank's line for its tail; what to show.

        A rank's stdout and stderr come through two pipes of mpirun, in either order (measured 2026-11-25 with Open
        MPI 5.0.11, 4 ranks on 2 loaded cores: a raising rank's 30 lines on stdout came after its traceback in 5 runs
        of 6, and --tail 8 showed no traceback); the numbers its tagger gave them put its last lines back in the order
        it wrote them.
        """
        line = line.lstrip(b"\0")  # PRRTE ends a banner with a NUL, after its newline: the next line starts with it
        tagged = split_tag(line)
        if tagged is None or (tagged.number is None and self._untagged_report(line, stream)):
            return self._launcher(line, stream)
        host, rank, number, rest = tagged
        kept = self._ranks.setdefault(rank, _Rank(host))
        kept.host = host
        text = rest.decode(errors="replace")
        if self.hide_banners and (self.family.hides(text) or (kept.hid and not text.strip())):
            kept.hid = self.family.hides(text)  # not in its tail either: the summary names the rank
            return b""
        kept.hid = False
        kept.in_fatal = self.family.in_fatal_report(text, kept.in_fatal)
        if kept.in_fatal and not self._own_story(rank):  # a consequence of a failure already heard
            return b""  # (the rank's log keeps it)
        shown = b"[%s:%d] " % (host.encode(), rank) + rest if self.options.tag else rest
        visible = self.shown is None or rank in self.shown
        if not line.endswith(b"\r"):  # a bar's redraws are not lines of the tail
            kept.keep(number, shown, self.options.tail)
            kept.unseen = kept.unseen or not visible
        if kept.in_fatal:  # the failure it follows may be heard later, on another path, or its report say so
            self._held.extend([(rank, stream, shown)] if visible else [])
            return b""
        return shown if visible else b""

    def _launcher(self, line: bytes, stream: str) -> bytes:
        """What to show of a line without a rank's tag: mpirun's own, where a help block is held until its closing
        rule, then judged whole; or a rank's fatal-error report after it gave its stderr back, held as its report.

        A blank line is held until the next: Hydra prints one before its banner, which goes with it.
        """
        if not self.hide_banners:
            return b"" if self.launcher_quiet else line
        text = line.decode(errors="replace")
        if self._untagged_report(line, stream):  # a rank's, after it gave its stderr back
            self._report.setdefault(stream, []).append(line)
            return b""
        self._settle(stream)
        block = self._block.get(stream)
        if block is None and not text.strip() and stream not in self._blank:
            self._blank[stream] = line
            return b""
        blank = self._blank.pop(stream, b"")
        if self.family.opens_block(text):
            if block is None:
                self._block[stream] = [blank, line]
                return b""
            whole = b"".join(block)
            line = b"" if self.family.reports_failure(whole.decode(errors="replace")) else whole + line
            del self._block[stream]
        elif block is not None:
            block.append(line)
            return b""
        elif self.family.hides(text):
            line = b""
        return b"" if self.launcher_quiet else blank + line

    def _untagged_report(self, line: bytes, stream: str) -> bool:
        """Whether an unnumbered `[host:N] ` line is a fatal-error report's with its MPI's own `[host:pid] `, not the
        rank's tag (its tagger numbers every line for the router)."""
        return self.family.in_fatal_report(line.decode(errors="replace"), stream in self._report)

    def _settle(self, stream: str) -> None:
        """An untagged fatal-error report read whole: held as the rank's that it names (-1: none, another's echo
        once any failure was heard)."""
        lines = self._report.pop(stream, [])
        rank = self.family.fatal_reporter([line.decode(errors="replace") for line in lines])
        rank = -1 if rank is None else rank
        if self.shown is None or rank in self.shown:
            self._held.extend((rank, stream, line) for line in lines)

    def failures(self, failed: Mapping[int, str], hosts: Mapping[int, str]) -> list[Failure]:
        """The failed ranks (rank -> how, in the order heard; their hosts where known), each with its last lines."""
        with self._lock:
            result = []
            for rank, how in failed.items():
                kept = self._ranks.get(rank, _Rank())
                result.append(Failure(rank, hosts.get(rank) or kept.host, how, kept.tail(), not kept.unseen))
            return result


class Console:
    """mpirun's output on its way to ours: the watch takes control lines out and notes failures, the router routes."""

    def __init__(self, watch: MpirunWatch, router: OutputRouter | None) -> None:
        self.watch, self.router = watch, router
        if router is not None:
            router.family = watch.family
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
        if self.watch.usage is not None:  # a rank told a usage error: hpcdist says it, Open MPI's banners go
            self.router.hide_banners = True
        # another rank's fatal-error report after a failure, or after a usage error told (its MPI_Abort's echo), is
        # the consequence of what hpcdist says: the rank's log keeps it
        self.router.failed = {*self.watch.failed, *self.watch.book.told_usage}
        self.router.usage = set(self.watch.book.told_usage)
        self.router.casualties = set(self.watch.book.after_peer)
        routed = self.router.feed(stream, shown) if shown else b""
        return routed if chunk else routed + self.router.finish(stream)

    def failures(self, returncode: int = 1) -> list[Failure]:
        """The ranks that failed (see MpirunWatch.named), each with its last lines (none without a router)."""
        if self.router is None:
            return []
        return self.router.failures(self.watch.named(returncode), self.watch.hosts)


def summary(failures: list[Failure], tail: int, log_dir: str | None = None) -> str:
    """The failure summary: for each failed rank whose lines the console did not show (`--ranks` left them out), a
    header naming it, then its last `tail` lines. A rank whose lines were shown as they came, or that printed nothing,
    gets none: the headline names every failed rank, and a traceback is said once.

    Past MOST_SUMMARIES ranks, the rest are grouped by how they ended, by host and as ranges, without their lines:
    a job of 10,000 failed ranks gives a page, not 200,000 lines. The line says where their lines are kept.
    """
    parts = [_block(failure, tail) for failure in failures[:MOST_SUMMARIES] if failure.tail and not failure.seen]
    rest = failures[MOST_SUMMARIES:]
    if rest:
        hosts = {failure.rank: failure.host for failure in rest}
        groups: dict[str, list[int]] = {}
        for failure in rest:
            groups.setdefault(_how(failure.how), []).append(failure.rank)
        shown = [f"{by_host(ranks, hosts)} {how}" for how, ranks in list(groups.items())[:MOST_SUMMARIES]]
        others = sum(len(ranks) for ranks in list(groups.values())[MOST_SUMMARIES:])
        shown += [f"{others:,} more ranks otherwise"] if others else []
        where = f"each rank's log in {log_dir}" if log_dir else "--log-dir DIR keeps every rank's lines"
        parts.append(
            f"hpcdist: and {len(rest):,} more failed ranks, their lines not shown ({where}): {'; '.join(shown)}\n"
        )
    return "".join(parts)


def _how(how: str) -> str:
    """'failed (exit code 1)', or as is for a rank the others waited for ('finished its program …')."""
    return how if how.startswith((*BLAMED_HOWS, "frozen")) else f"failed ({how})"


def _block(failure: Failure, tail: int) -> str:
    """One failed rank: a header naming it, then its last `tail` lines."""
    lines = failure.tail[-tail:] if tail else ()
    head = f"hpcdist: rank {failure.rank} on {failure.host} {_how(failure.how)}"
    if not lines:
        return f"{head}{'; it printed nothing' if tail else ''}\n"
    body = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
    count = "its last line" if len(lines) == 1 else f"its last {len(lines)} lines"
    return f"{head}; {count}:\n" + body.decode(errors="replace")
