"""Read mpirun's output as it streams: lost hosts, the ranks' control lines, the failures it reports (pure)."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import deque
from collections.abc import Collection, Mapping

from ..control import AFTER_PEER, parse_control, parse_usage
from ..errors import JobEnding, LauncherStalled
from ..ranklist import describe_status, ranks_text
from .heartbeat import Heartbeats
from .outcome import BLAMED, LOST_HOST_STATUS, USAGE_STATUS, VANISHED, LaunchOutcome
from .shrink import ShrinkWatch

__all__ = ["LAUNCHER_GRACE", "LostHostWatch", "MpirunWatch"]

LAUNCHER_GRACE = 10.0  # seconds the MPI launcher has to end the job after a rank failed before hpcdist mpirun does

# Open MPI 5 (PRRTE) and 4 (ORTE) exit 0 and leave the job unfinished when a node's daemon dies or its
# link is cut. Measured with Open MPI 5.0.11, each banner names the node a few lines further down:
# - daemon gone or link cut (TCP keepalive), on stderr:
#     PRTE has lost communication with a remote daemon.
#       HNP daemon   : [prterun-n1-16000@0,0] on node n1
#       Remote daemon: [prterun-n1-16000@0,1] on node n2
# - the launch agent's process (ssh) on that node killed while the job runs, on STDOUT:
#     A daemon failed to report back after being spawned. …
#       Local host:    n1
#       Remote host:   n2
# MPICH 5.0.2's Hydra, when a host's proxy dies (everything on it killed), ends at once with status 255 and
# names no host:
#     [mpiexec@n1] control_cb (/mpich-5.0.2/src/pm/hydra/mpiexec/pmiserv_cb.c:280): assert (!closed) failed
_BANNERS = re.compile(
    r"\b(?:PRTE|ORTE) has lost communication with a remote daemon|\bA daemon failed to report back after being spawned"
    r"|\] control_cb \(.*\): assert \(!closed\) failed"
)
_HOST = re.compile(r"Remote daemon\s*:\s*\S+\s+on node\s+(\S+)|Remote host\s*:\s*(\S+)")
# A daemon that never started (ssh could not reach the host, or prted cannot run there) is reported as one that
# failed to report back, with the launch agent's non-zero status (255 from ssh); a killed agent leaves status 0.
_NOT_STARTED = re.compile(r"\bA daemon failed to report back after being spawned")
_AGENT_STATUS = re.compile(r"Daemon exit status\s*:\s*([0-9]+)")


class LostHostWatch:
    """Fed mpirun's stdout and stderr in chunks of any size; remembers whether and which hosts were lost."""

    def __init__(self) -> None:
        self.lost = False
        self.hosts: list[str] = []
        self.agent_status: int | None = None  # the launch agent's status, when a daemon failed to report back
        self._report_back = False
        self._partial: dict[str, str] = {}
        self._lock = threading.Lock()

    def feed(self, stream: str, chunk: bytes) -> None:
        """Scan the complete lines of a chunk of `stream`; a partial last line waits for the next chunk."""
        with self._lock:
            text = self._partial.get(stream, "") + chunk.decode(errors="replace")
            *lines, self._partial[stream] = text.split("\n")
            for line in lines:
                self._scan(line)

    def _scan(self, line: str) -> None:
        """Note a lost-daemon banner and the host it names."""
        if _BANNERS.search(line):
            self.lost = True
            self._report_back = self._report_back or bool(_NOT_STARTED.search(line))
        status = _AGENT_STATUS.search(line)
        if status and self._report_back:
            self.agent_status = int(status.group(1))
        match = _HOST.search(line)
        if match and self.lost:
            host = match.group(1) or match.group(2)
            if host not in self.hosts:
                self.hosts.append(host)

    def mid_line(self, stream: str) -> bool:
        """Whether `stream` ended without a newline (PRRTE ends its banners with a NUL byte)."""
        with self._lock:
            return bool(self._partial.get(stream, "").strip("\0 \t\r"))

    def verdict(self, returncode: int, hosts: Mapping[int, str] | None = None) -> tuple[int, str | None]:
        """hpcdist mpirun's exit status for mpirun's `returncode`, and an error message when a host was lost (naming
        the ranks that ran there, where `hosts`, rank -> host, knows them)."""
        with self._lock:
            for partial in self._partial.values():
                self._scan(partial)
            self._partial.clear()
            if not self.lost:
                return returncode, None
            names, lost = ", ".join(self.hosts), list(self.hosts)
        status = returncode if returncode != 0 else LOST_HOST_STATUS
        returned = f"although mpirun returned {returncode}" if returncode == 0 else f"(mpirun returned {returncode})"
        if self.agent_status and names:
            first = names.split(", ")[0]
            return status, (
                f"mpirun could not start its daemon on host {names} (its launch agent, ssh unless --launch-agent "
                f"names another, ended with status {self.agent_status}), so the job did not run {returned}; check "
                f"that `ssh {first} true` works from here without a password, and that this Python environment "
                "exists there at the same path"
            )
        who, check = (f"host {names}", names) if names else ("a remote host (it names none)", "every host")
        there = [rank for rank, host in (hosts or {}).items() if host in lost]
        who += f", where {ranks_text(there)} ran" if there else ""
        return status, (
            f"mpirun lost contact with {who} (its daemon died or the network link was cut), so the job "
            f"did not finish {returned}; check that {check} is up and reachable"
        )


# Open MPI 5 (PRRTE), over two or three lines:
#   prterun noticed that process rank 1 with PID 24671 on node vm exited on
#   signal 9 (Killed).
_KILLED = re.compile(
    r"noticed that process rank (?P<rank>[0-9]+) with PID [0-9]+ on node (?P<host>\S+) "
    r"exited on\s+signal (?P<sig>[0-9]+)"
)
# and when a program calls MPI_Abort itself (the shim says `failed` before it does):
#   prterun has exited due to process rank 3 with PID 0 on node vm calling
#   "abort". This may have caused other processes in the application to be
_ABORTED = re.compile(
    r"exited due to process rank (?P<rank>[0-9]+) with PID [0-9]+ on node (?P<host>\S+) calling\s+\"abort\""
)
# MPICH's library, on the stderr of a rank that calls MPI_Abort (its rank in MPI_COMM_WORLD, comm 0):
#   Abort(7) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 7) - process 1
_MPICH_ABORTED = re.compile(r"\bAbort\([0-9]+\) on node [0-9]+ \(rank (?P<rank>[0-9]+) in comm 0\): application called")
_MARK = b"@@hpcdist:"


class MpirunWatch:
    """Reads mpirun's output for lost hosts, the ranks' control lines and the failures mpirun reports.

    `feed` returns what of each chunk to show: control lines are taken out whole, and the end of a line
    that may still become one is held back until it is whole (all else passes at once, progress bars too).
    """

    def __init__(
        self,
        token: str = "",
        vanished_named: bool = False,
        heartbeat: float | None = None,
        shrink: bool = False,
        np: int | None = None,
    ) -> None:
        self.token = token
        self.shrink = ShrinkWatch(np) if shrink else None  # --on-failure shrink: a lost rank is named, the job goes on
        self.vanished_named = vanished_named
        self.lost = LostHostWatch()
        self.heartbeats = Heartbeats(heartbeat)  # `heartbeat`: the limit in seconds (None: not watched)
        self._causes: set[int] | None = None  # when hpcdist mpirun ended the job: the ranks named before it did
        self.ready: set[int] = set()
        self.world_size: int | None = None
        self.failed: dict[int, str] = {}
        self.after_peer: set[int] = set()  # failed ranks that were casualties: a peer had gone, or their call failed
        self.at: dict[int, float] = {}  # rank -> when it failed or finished, by its own clock (`at=`)
        self.calls: dict[int, str] = {}  # rank -> the communication call it failed in or waited in (`in=`)
        self.finished: list[int] = []  # ranks whose programs ended well (they then wait for the others), as heard
        self.done: set[int] = set()  # ranks that said they ended well
        self.hang: dict[str, str] | None = None  # the hang report's verdict (forensics/cause.py: tell_hang)
        self.hosts: dict[int, str] = {}
        self.vanished: list[int] = []  # ranks whose taggers saw them end without a word, in the order heard
        self.first_vanished: int | None = None  # the first of them, when it was heard before any failure
        self.stalled: str | None = None  # set when the launcher left the job running after a rank failed
        self.usage: str | None = None  # the first usage error a rank told (said once for the job)
        self._first_failure: tuple[float, int] | None = None  # when, and which, rank was first heard to fail or vanish
        self._held: dict[str, bytes] = {}
        self._recent: dict[str, deque[str]] = {}
        self._lock = threading.Lock()

    def feed(self, stream: str, chunk: bytes) -> bytes:
        """Note what a chunk of `stream` says and return what of it to show; b"" (the end) returns what was held."""
        self.lost.feed(stream, chunk)
        with self._lock:
            data = self._held.pop(stream, b"") + chunk
            if not chunk:
                return b"" if not data or self._take(stream, data) else data
            *lines, tail = data.split(b"\n")
            shown = [line + b"\n" for line in lines if not self._take(stream, line)]
            cut = _control_start(tail)
            self._held[stream] = tail[cut:]
            return b"".join(shown) + tail[:cut]

    def _take(self, stream: str, line: bytes) -> bool:
        """Act on one whole line; True when it is a control line (never shown)."""
        text = line.decode(errors="replace")
        event = parse_control(text, self.token) if _MARK in line else None
        if event is not None:
            fields = dict(word.partition("=")[::2] for word in event.detail.split())
            if event.event == "ready":
                self.ready.add(event.rank)
                if fields.get("world", "").isdigit():
                    self.world_size = int(fields["world"])
            elif event.event == "failed" and event.rank not in self.failed:  # how it ended, host=, after=, in=, at=
                self.failed[event.rank] = " ".join(w for w in event.detail.split() if "=" not in w)
                self._when(event.rank, fields)
                if AFTER_PEER in event.detail.split() or fields.get("in"):
                    self.after_peer.add(event.rank)
            elif event.event == "finished" and event.rank not in self.finished:
                self.finished.append(event.rank)
                self._when(event.rank, fields)
            elif event.event == "hang" and self.hang is None:  # its reporter's abort follows: a casualty
                self.hang = fields
                self.after_peer.add(event.rank)
            elif event.event == "done":
                self.done.add(event.rank)
            elif event.event == "usage" and self.usage is None:
                self.usage = parse_usage(event.detail)
            elif event.event == "vanished" and event.rank not in self.vanished:
                if not self.vanished and not self._began():
                    self.first_vanished = event.rank
                self.vanished.append(event.rank)
            if event.event in ("failed", "vanished") and self._first_failure is None:
                self._first_failure = (time.monotonic(), event.rank)

            if fields.get("host"):
                self.hosts.setdefault(event.rank, fields["host"])
            self._heard(event.event, event.rank, fields.get("host", ""))
            if self.shrink is not None and event.event in ("failed", "vanished"):
                how = self.failed.get(event.rank)
                self._lose({event.rank: f"failed ({how})" if how else f"lost ({VANISHED})"})
            return True
        mpich = _MPICH_ABORTED.search(text)
        if mpich is not None:  # the output router leaves this line out: the failure summary names the rank
            self.failed.setdefault(int(mpich["rank"]), "called MPI_Abort")
        recent = self._recent.setdefault(stream, deque(maxlen=3))
        recent.append(text.strip("\0 \t\r"))
        joined = " ".join(recent)  # PRRTE breaks its banners over lines
        killed, aborted = _KILLED.search(joined), _ABORTED.search(joined)
        found = killed or aborted
        if found is not None:
            rank = int(found["rank"])
            self.failed.setdefault(rank, describe_status(-int(killed["sig"])) if killed else "called MPI_Abort")
            self.hosts.setdefault(rank, found["host"])
            recent.clear()
            if self.shrink is not None:
                self._lose({rank: f"failed ({self.failed[rank]})"})
        return False

    def _lose(self, ranks: Mapping[int, str]) -> None:
        """Under shrink: note ranks lost (rank -> how), named once each; the job goes on without them."""
        if self.shrink is not None:
            self.shrink.lose(ranks, self.hosts, self.world_size)

    def news(self) -> list[str]:
        """Lines to print now: under shrink, each loss as it is heard.

        Not a lost host's daemon: Open MPI 5.0.11's runtime (PRRTE 3.0) then ends the whole job, ULFM or not
        ("We cannot recover from this failure"), and the error at the end names the host (LostHostWatch.verdict).
        """
        return [] if self.shrink is None else self.shrink.news()

    def _when(self, rank: int, fields: Mapping[str, str]) -> None:
        """Note when a rank said it failed or finished (`at=`), and the call it was in (`in=`)."""
        with contextlib.suppress(ValueError):  # a line without a time: ordered as heard
            self.at.setdefault(rank, float(fields.get("at", "")))
        if fields.get("in"):
            self.calls.setdefault(rank, fields["in"])

    def _began(self) -> bool:
        """Whether a failure not caused by a peer's loss, or a hang report, was heard (a rank that vanishes then is
        its sequel)."""
        return self.hang is not None or any(rank not in self.after_peer for rank in self.failed)

    def _blamed(self, failed: Mapping[int, str]) -> dict[int, str]:
        """When every failure was a casualty: the ranks the others waited for (rank -> how), else none.

        The hang report's verdict names them (a rank that finished its program, was in no call, or never
        initialised, while others waited in one); without one, the ranks that said their program finished before
        the first casualty failed.
        """
        if any(rank not in self.after_peer for rank in failed):
            return {}
        if self.hang is not None:
            waiting = [int(r) for r in self.hang.get("waiting", "").split(",") if r.isdigit()]
            call = self.hang.get("in", "").replace("#", " #")
            while_ = f" while {ranks_text(waiting)} waited in {call}" if waiting and call else ""
            blamed = {
                int(rank): f"{text}{while_}"
                for kind, text in BLAMED.items()
                for rank in self.hang.get(kind, "").split(",")
                if rank.isdigit()
            }
            return blamed  # none when all waited (mismatched calls): the report's first divergence says which
        first = min((self.at.get(rank, float("inf")) for rank in failed), default=float("inf"))
        early = [rank for rank in self.finished if rank not in failed and self.at.get(rank, first) < first]
        if not early or not failed:
            return {}
        waited = sorted(failed)
        calls = sorted({self.calls[rank].replace("#", " #") for rank in waited if rank in self.calls})
        where = f" waited in {', '.join(calls)}" if calls else " failed after it"
        return dict.fromkeys(early, f"{BLAMED['finished']} while {ranks_text(waited)}{where}")

    def _heard(self, event: str, rank: int, host: str) -> None:
        """Keep the heartbeats: a `beat` counts, and a rank that said how it ended is no longer expected to beat."""
        if event == "beat":
            self.heartbeats.beat(rank, host)
        elif event in ("done", "failed", "vanished"):
            self.heartbeats.ended(rank)

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
                        self._lose(dict.fromkeys(silent, f"lost (no heartbeat for {self.heartbeats.limit or 0:g} s)"))
                return
            self.heartbeats.check()
            with self._lock:
                if self._first_failure is None or self.stalled:
                    return
                since, first = self._first_failure
                if time.monotonic() - since < LAUNCHER_GRACE:
                    return
                how = self.failed.get(first, VANISHED)
                self.stalled = (
                    f"rank {first} on {self.hosts.get(first, '?')} failed ({how}) and the MPI launcher had not ended "
                    f"the job {LAUNCHER_GRACE:g} s later"
                )
            raise LauncherStalled(self.stalled)
        except JobEnding:
            with self._lock:
                self._causes = {*self.failed, *self.vanished, *self.heartbeats.silent}
            raise

    @property
    def ending(self) -> bool:
        """Whether the job is ending for a lost host or because hpcdist mpirun ended it: the ranks it ends from now on
        are said in one line (LaunchOutcome.ended_line), not each on its own."""
        return self._causes is not None or bool(self.lost.hosts)

    def _ended(self, named: Collection[int], lost: Collection[str]) -> dict[int, str]:
        """When the job is `ending`, the ranks its end reached: rank -> how it said it ended ('' when unheard).

        Not those `named` (the failure's causes), those on the `lost` hosts (named in the error) or those that
        ended well."""
        if not self.ending:
            return {}
        heard = {*self.hosts, *self.failed}
        return {
            rank: self.failed.get(rank, "")
            for rank in sorted(heard)
            if rank not in named and rank not in self.done and self.hosts.get(rank) not in lost
        }

    def _silent(self) -> dict[int, str]:
        """The ranks whose heartbeat hpcdist mpirun stopped hearing (it ended the job for them): rank -> how."""
        beats = self.heartbeats
        if beats.problem is None:
            return {}
        return dict.fromkeys(beats.silent, f"no heartbeat for {beats.limit:g} s")

    def named(self, returncode: int) -> dict[int, str]:
        """The failed ranks (rank -> how), if the launch failed first the ranks seen to vanish that caused it.

        Hydra (`vanished_named`) SIGKILLs every other rank's process group in its clean-up, taggers included, so a
        tagger that says its rank vanished speaks of the rank that was killed. Open MPI's clean-up leaves the taggers
        to see their ranks killed, after the failure that began it, and names a killed rank itself, unless a peer's
        failure reaches it first (a peer blocked on the killed rank's sockets): there only the first rank heard to
        vanish before any failure is named, a failure whose error said a peer had gone (`after=peer`) not counting:
        the killed rank's tagger hears its end only once the process is torn down, often after that peer's word.
        The ranks that failed after a peer's loss come last.
        """
        with self._lock:
            failed = dict(self.failed)
            if returncode == 0:
                return failed
            if self.vanished_named:
                first = self.vanished
            else:
                first = [] if self.first_vanished is None else [self.first_vanished]
            blamed = self._blamed(failed)
            vanished = {rank: VANISHED for rank in first if rank not in failed and not blamed}
            named = {**vanished, **self._silent(), **failed, **blamed}
            if self._causes is not None:
                named = {r: how for r, how in named.items() if r in self._causes or r in blamed}
            heard = list(named)
            return dict(sorted(named.items(), key=lambda item: self._order(item[0], heard, blamed)))

    def _order(self, rank: int, heard: list[int], blamed: Mapping[int, str]) -> tuple[bool, float, int]:
        """Causes before casualties; within each, by when the rank said it ended (its own clock), then as heard."""
        return (rank in self.after_peer and rank not in blamed, self.at.get(rank, float("inf")), heard.index(rank))

    def outcome(self, returncode: int, signals: tuple[int, ...] = ()) -> tuple[LaunchOutcome, str | None]:
        """The launch's outcome for mpirun's `returncode`, and the lost-host error to print (None if none)."""
        with self._lock:
            hosts = {**self.heartbeats.silent, **self.hosts}
        status, problem = self.lost.verdict(returncode, hosts)
        if problem and self.shrink is not None and not self.lost.agent_status:
            problem += (
                "; Open MPI's runtime ends the whole job when it loses a host's daemon, even under --on-failure shrink "
                "(which carries on after lost ranks, not hosts); with --max-restarts N it starts again without the host"
            )
        if self.usage is not None:
            status = USAGE_STATUS
        failed = self.named(returncode)
        beats = self.heartbeats
        if self.stalled is not None:
            problem = problem or f"{self.stalled}; hpcdist mpirun ended it"
        if beats.problem is not None:  # hpcdist mpirun ended the job: the silent ranks and hosts are its cause
            status = status or LOST_HOST_STATUS
            problem = (
                problem
                or f"{beats.problem}; hpcdist mpirun ended the job (check that the host is up and "
                "reachable; --heartbeat-timeout or $HPCDIST_HEARTBEAT_TIMEOUT sets the limit)"
            )
        lost = tuple(dict.fromkeys([*self.lost.hosts, *beats.lost_hosts]))
        ended = self._ended(failed, lost)
        if self.shrink is not None and self.shrink.finished_well(self.done, self.world_size):
            status, problem, ended = 0, None, {}  # the survivors' status: each loss was named as it happened
            failed = {rank: failed[rank] for rank in self.shrink.lost if rank in failed}
        with self._lock:
            return LaunchOutcome(
                status=status,
                lost_hosts=lost,
                ready=frozenset(self.ready),
                world_size=self.world_size,
                failed=failed,
                hosts=hosts,
                signals=signals,
                after_peer=frozenset(self.after_peer & failed.keys()),
                usage=self.usage,
                ended=ended,
            ), problem


def _control_start(tail: bytes) -> int:
    """Where in an unfinished line a control line may begin (its length when nowhere): show what is before."""
    at = tail.find(b"@")
    while at != -1:
        rest = tail[at:]
        if rest.startswith(_MARK) or _MARK.startswith(rest):
            return at
        at = tail.find(b"@", at + 1)
    return len(tail)
