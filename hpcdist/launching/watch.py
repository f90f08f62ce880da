"""Read the MPI launcher's output as it streams: the ranks' events, the launcher's own words, and the outcome (pure).

The coordinator of small pieces: each whole line is either a rank's event (`events.parse_event`), noted in the
rank book (`book`), or a line of the launcher's, read by its family's scanner (`hpcdist.families`) for lost hosts
(`lost`) and ranks it reports killed or aborted. Beside them: the heartbeats (`heartbeat`), the losses the survivors
carry on after (`shrink`), and who is named for the failure (`blame`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from .. import families
from ..errors import JobEnding, LauncherStalled
from ..events import Beat, Done, Event, Failed, Ready, Started, Vanished, might_start_event, parse_event
from ..families.base import AgentFailed, HostLost, Observation
from ..status import status_of
from . import blame
from .book import RankBook
from .heartbeat import Heartbeats
from .lost import LostHosts
from .outcome import LOST_HOST_STATUS, VANISHED, LaunchOutcome
from .shrink import ShrinkWatch

__all__ = ["LAUNCHER_GRACE", "MpirunWatch"]

LAUNCHER_GRACE = 10.0  # seconds the MPI launcher has to end the job after a rank failed before hpcdist mpirun does
_MOST_EARLY = 1 << 16  # bytes of an unfinished line kept for the scanner (a progress bar's redraws, however many)


class MpirunWatch:
    """Reads the launcher's output for the ranks' events, lost hosts and the failures the launcher reports.

    `feed` returns what of each chunk to show: event lines are taken out whole, and the end of a line that may still
    become one is held back until it is whole (all else passes at once, progress bars too). `family` names the MPI
    whose launcher runs (None: every family's words are read); `vanished_named` overrides what it says of a rank
    seen to vanish (see `blame.named`). `heartbeat`: the limit in seconds (None: not watched), and `startup` the
    silence allowed until every rank is past MPI_Init (launching/heartbeat.py). `shrink` (`np` ranks): a lost rank
    is named as it is heard and the job goes on.
    """

    def __init__(
        self,
        token: str = "",
        vanished_named: bool | None = None,
        heartbeat: float | None = None,
        shrink: bool = False,
        np: int | None = None,
        family: str | None = None,
        spares: int = 0,
        startup: float | None = None,
    ) -> None:
        self.token = token
        self.family = families.listening(family)
        self.vanished_named = self.family.names_vanished if vanished_named is None else vanished_named
        self.book = RankBook()
        self.lost = LostHosts()
        self.heartbeats = Heartbeats(heartbeat, startup)
        self.shrink = ShrinkWatch(np, spares) if shrink else None
        self.stalled: str | None = None  # set when the launcher left the job running after a rank failed
        self._scanner = self.family.scanner()
        self._causes: set[int] | None = None  # when hpcdist mpirun ended the job: the ranks named before it did
        self._held: dict[str, bytes] = {}  # per stream, the end of a line that may become an event line
        self._early: dict[str, bytes] = {}  # per stream, the start of an unfinished line (already shown)
        self._mid_line: dict[str, bool] = {}
        self._lock = threading.Lock()

    @property
    def failed(self) -> dict[int, str]:
        """The ranks heard to fail so far: rank -> how."""
        return self.book.failed

    @property
    def hosts(self) -> dict[int, str]:
        """Each rank's host, where heard (its events, its host's beats)."""
        return self.book.hosts

    @property
    def usage(self) -> str | None:
        """The first usage error a rank told."""
        return self.book.usage

    def feed(self, stream: str, chunk: bytes) -> bytes:
        """Note what a chunk of `stream` says and return what of it to show; b"" (the end) returns what was held."""
        with self._lock:
            data = self._held.pop(stream, b"") + chunk
            if not chunk:  # the end: what is left is a whole line
                line = self._early.pop(stream, b"") + data
                self._mid_line[stream] = bool(line.strip(b"\0 \t\r"))  # PRRTE ends its banners with a NUL
                return b"" if line and self._line(stream, line) else data
            *lines, tail = data.split(b"\n")
            shown = [line + b"\n" for line in lines if not self._line(stream, self._early.pop(stream, b"") + line)]
            cut = might_start_event(tail)
            self._held[stream] = tail[cut:]
            self._early[stream] = (self._early.get(stream, b"") + tail[:cut])[-_MOST_EARLY:]
            return b"".join(shown) + tail[:cut]

    def mid_line(self, stream: str) -> bool:
        """Whether `stream` ended without a newline (PRRTE ends its banners with a NUL byte)."""
        return self._mid_line.get(stream, False)

    def _line(self, stream: str, line: bytes) -> bool:
        """Act on one whole line; True when it is an event line (never shown)."""
        text = line.decode(errors="replace")
        event = parse_event(text, self.token) if self.token else None
        if event is not None:
            self._hear(event)
            return True
        for seen in self._scanner.scan(stream, text):
            self._observe(seen)
        return False

    def _hear(self, event: Event) -> None:
        """A rank's event: into the book, the heartbeats, and under shrink a loss."""
        self.book.hear(event, time.monotonic())
        if isinstance(event, Beat):
            for rank, (age, frozen) in event.members().items():  # a host's ranks, in one beat
                self.heartbeats.beat(rank, event.host, frozen, age)
        elif isinstance(event, (Done, Failed, Vanished)):  # no longer expected to beat
            self.heartbeats.ended(event.rank)
        elif isinstance(event, Started) or (isinstance(event, Ready) and len(self.book.ready) == self.book.world_size):
            self.heartbeats.up()  # every rank is past MPI_Init (or, with the user's own rendezvous, in its group)
        if self.shrink is not None and isinstance(event, (Failed, Vanished)) and self.book.usage is None:
            how = self.book.failed.get(event.rank)  # once a rank told a usage error, the job ends with it, said once
            if isinstance(event, Failed) and event.after_peer:  # it could not carry on without the peer
                self._lose({event.rank: f"left after a peer's loss ({how})"})
            else:
                self._lose({event.rank: f"failed ({how})" if how else f"lost ({VANISHED})"})

    def _observe(self, seen: Observation) -> None:
        """What the family's scanner found: a lost host, or a rank the launcher reports killed or aborted."""
        if isinstance(seen, (HostLost, AgentFailed)):
            self.lost.note(seen)
            return
        how = self.book.reported(seen)
        self._lose({seen.rank: f"failed ({how})"})

    def _lose(self, ranks: Mapping[int, str]) -> None:
        """Under shrink: note ranks lost (rank -> how), named once each; the job goes on without them."""
        if self.shrink is not None:
            self.shrink.lose(ranks, self.book.hosts, self.book.world_size)

    def news(self) -> list[str]:
        """Lines to print now: under shrink, each loss as it is heard.

        Not a lost host's daemon: Open MPI's runtime then ends the whole job, and the error at the end names the host.
        """
        return [] if self.shrink is None else self.shrink.news()

    def check(self) -> None:
        """Raise JobEnding when the job must end: a rank fell silent (Heartbeats.check), or the launcher stalled.

        Stalled: a rank failed or vanished LAUNCHER_GRACE seconds ago and the launcher still runs (Hydra, at
        times, leaves the others running after a rank's `os._exit`). hpcdist mpirun then ends the job (SIGTERM
        to mpirun, which passes it on): the ranks that fail or vanish after that are its consequences, not named.
        """
        try:
            if self.shrink is not None:  # a silent rank is lost, and the launcher runs on by design
                silent = self.heartbeats.fell_silent()
                if silent:
                    with self._lock:
                        self._lose({rank: f"lost ({self.heartbeats.silence(rank)})" for rank in silent})
                return
            self.heartbeats.check()
            with self._lock:
                if self.book.first_failure is None or self.stalled:
                    return
                since, first = self.book.first_failure
                if time.monotonic() - since < LAUNCHER_GRACE:
                    return
                how = self.book.failed.get(first, VANISHED)
                self.stalled = (
                    f"rank {first} on {self.book.hosts.get(first, 'an unknown host')} failed ({how}) and the MPI "
                    f"launcher had not ended the job {LAUNCHER_GRACE:g} s later"
                )
            raise LauncherStalled(self.stalled)
        except JobEnding:
            with self._lock:
                self._causes = {*self.book.failed, *self.book.vanished, *self.heartbeats.silent}
            raise

    @property
    def ending(self) -> bool:
        """Whether the job is ending for a lost host or because hpcdist mpirun ended it: the ranks it ends from now on
        are said in one line (LaunchOutcome.ended_line), not each on its own."""
        return self._causes is not None or bool(self.lost.hosts)

    @property
    def ended_it(self) -> bool:
        """Whether hpcdist mpirun ended the job itself (a silent or frozen rank, a stalled launcher), saying why."""
        return self._causes is not None

    def named(self, returncode: int) -> dict[int, str]:
        """The failed ranks (rank -> how), causes first (see `blame.named`)."""
        beats = self.heartbeats
        silent = {rank: beats.silence(rank) for rank in beats.silent} if beats.problem else {}
        with self._lock:
            return blame.named(self.book, returncode, self.vanished_named, silent, self._causes)

    def outcome(self, returncode: int, signals: tuple[int, ...] = ()) -> tuple[LaunchOutcome, str | None]:
        """The launch's outcome for the launcher's `returncode`, and the lost-host error to print (None if none)."""
        book, beats = self.book, self.heartbeats
        with self._lock:
            hosts = {**beats.silent, **book.hosts}
            status, problem = self.lost.verdict(returncode, hosts)
        if problem and self.shrink is not None and not self.lost.agent_status and self.family.lost_host_note:
            problem += f"; {self.family.lost_host_note}"
        failed = self.named(returncode)
        if self.shrink is not None:  # a rank that told the job's one error (said once) ended with it, as no loss
            failed = {rank: how for rank, how in failed.items() if rank not in book.told_usage}
        # the first failure's status, as it is named: what Open MPI's and MPICH's launchers return, where srun, PALS
        # and flux run sum up every rank's, and the same whatever a launcher's teardown made of its own
        first = status_of(next(iter(failed.values()), "")) if returncode else None
        status = first or status
        if book.usage is not None:
            status = book.usage_status
        if self.stalled is not None:
            problem = problem or f"{self.stalled}; hpcdist mpirun ended it"
        if beats.problem is not None:  # hpcdist mpirun ended the job, saying why as it did: the silent ranks and hosts
            status = status or LOST_HOST_STATUS
        lost = tuple(dict.fromkeys([*self.lost.hosts, *beats.lost_hosts]))
        ended = blame.ended(book, failed, lost) if self.ending else {}
        if self.shrink is not None and self.shrink.finished_well(book.done, book.world_size):
            # the survivors' status, the first one of them declared (sys.exit's); each loss was named as it happened
            status, problem, ended = next(iter(book.declared.values()), 0), None, {}
            failed = {rank: failed[rank] for rank in self.shrink.lost if rank in failed}
        with self._lock:
            return LaunchOutcome(
                status=status,
                lost_hosts=lost,
                ready=frozenset(book.ready),
                world_size=book.world_size,
                failed=failed,
                hosts=hosts,
                signals=signals,
                after_peer=frozenset(book.after_peer & failed.keys()),
                usage=book.usage,
                ended=ended,
            ), problem
