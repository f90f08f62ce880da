"""hpcdist's own heartbeat: each rank's tagger beats in band; a rank that was beating and goes silent is lost (pure).

Hydra has no keepalive: with a host's link cut and its ranks idle, MPICH's mpiexec waits forever (measured with
MPICH 5.0.2). `hpcdist mpirun` therefore hands every rank the contract's beat interval (the seconds between beats: a
sixth of the limit, at most 5 s, or past 5,000 hosts what keeps the launcher to MAX_BEATS lines a second); the
rank's tagger, a process of its own, beats that often, however busy the rank is (in a blocking MPI call, or a loop
that holds the GIL), and the lowest rank of each host still beating sends its host's beats as one `beat` event
(rank.hostbeat). The watch ends the job when a rank that was beating, and has not said how it ended, is silent
longer than the limit: `--heartbeat-timeout`, else the HEARTBEAT_TIMEOUT setting, else DEFAULT_HEARTBEAT_TIMEOUT
(longer past 5,000 hosts); 0 turns it off. Until rank 0 says that every rank is past MPI_Init (`Started`), silence
is judged by the ranks' own start-up wait instead, when longer: a host's launcher daemon, busy wiring up many ranks,
forwards no line for tens of seconds (measured: 30 s and more at 256 ranks on four hosts sharing 2 cores).

The beats come from the tagger, not the rank, so each one also says whether the rank's process is frozen (stopped,
in a frozen cgroup, or in uninterruptible sleep using no CPU: rank.frozen): a beat of a frozen rank counts as none,
and a rank frozen past the limit is named frozen, with how, rather than silent; its host, still beating, is not lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from .. import settings, settingtable
from ..errors import HeartbeatLost
from ..ranklist import ranks_text

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "MAX_BEATS",
    "Heartbeats",
    "beat_interval",
    "heartbeat_limit",
]

DEFAULT_HEARTBEAT_TIMEOUT = 30.0  # Open MPI's PRRTE notices a cut link in ~5 s; this is the backstop for every MPI
# what to do about a lost host, said with it (once, as hpcdist mpirun ends the job)
_CHECK_HOSTS = (
    f" (check that the host is up and reachable; --heartbeat-timeout or ${settingtable.HEARTBEAT_TIMEOUT.name} sets "
    "the limit)"
)
_STARTING = (
    f" (check that the host is up and reachable; until every rank is past MPI_Init the limit is the ranks' start-up "
    f"wait, which ${settingtable.STARTUP_TIMEOUT.name} sets)"
)
_MOST_HOSTS = 4  # hosts named one by one in what fell silent; the rest are counted
MAX_BEATS = 1000  # beat lines a second the launcher reads at most, at the default limit: 60 s at 10,000 hosts
_MAX_INTERVAL = 5.0  # seconds between beats at most: 12 short lines a minute per host


def heartbeat_limit(option: float | None, environ: Mapping[str, str], hosts: int = 1) -> float | None:
    """The heartbeat limit in seconds: `option` (MpirunOptions checked it), else the HEARTBEAT_TIMEOUT setting, else 30
    (for `hosts` hosts, at least six beats of `beat_interval`, so that the launcher hears MAX_BEATS a second at most);
    None when 0 (off).

    Raises:
        UsageError: the variable's value is no number of seconds, negative, or above 30 days.
    """
    if option is not None:
        return option or None
    value = settings.heartbeat_timeout(environ)
    if value is None:
        return max(DEFAULT_HEARTBEAT_TIMEOUT, 6 * hosts / MAX_BEATS)
    return value or None


def beat_interval(limit: float, hosts: int = 1) -> float:
    """Seconds between a rank's beats for a `limit`: a sixth of it, at most 5 s, or for `hosts` hosts, where the
    limit allows, as long as the launcher needs to hear MAX_BEATS a second at most (10 s at 10,000 hosts)."""
    return min(limit / 6, max(_MAX_INTERVAL, hosts / MAX_BEATS))


class Heartbeats:
    """The last beat heard from each rank still running; `check` raises HeartbeatLost when one fell silent."""

    def __init__(self, limit: float | None, startup: float | None = None) -> None:
        self.limit = limit
        # the silence allowed until the job is up (`up`): the ranks' start-up wait, `startup`, where longer
        self.startup = max(limit, startup) if limit is not None and startup is not None else limit
        self.starting = startup is not None  # until `up`
        self.lost_hosts: list[str] = []  # hosts whose every running rank fell silent
        self.silent: dict[int, str] = {}  # rank -> its host, for each rank that fell silent
        self.problem: str | None = None  # what was found, as the error to print at the end
        self._last: dict[int, float] = {}
        self._hosts: dict[int, str] = {}
        self._frozen: dict[int, str] = {}  # rank -> how its last beat said it is frozen
        self._ended: set[int] = set()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def beat(self, rank: int, host: str, frozen: str = "", age: float = 0.0) -> None:
        """Note a beat of `rank` on `host`, `age` seconds ago (ignored once the rank said how it ended); a beat that
        says the rank is `frozen` counts as none (its silence goes on from its last beat before it froze)."""
        with self._lock:
            if rank in self._ended:
                return
            self._hosts[rank] = host or "unknown host"
            when = time.monotonic() - age
            if frozen:
                self._frozen[rank] = frozen
                self._last.setdefault(rank, when)
            else:
                self._frozen.pop(rank, None)
                self._last[rank] = max(when, self._last.get(rank, when))

    def up(self) -> None:
        """Every rank is past MPI_Init: from now on silence is judged by the limit, each rank's counted afresh."""
        with self._lock:
            if self.starting:
                self.starting = False
                self._last = dict.fromkeys(self._last, time.monotonic())

    @property
    def window(self) -> float | None:
        """The silence allowed now, in seconds: the start-up wait until the job is up, then the limit."""
        return self.startup if self.starting else self.limit

    def ended(self, rank: int) -> None:
        """`rank` said how it ended (done, failed, vanished): its silence from now on is no loss."""
        with self._lock:
            self._ended.add(rank)
            self._last.pop(rank, None)

    def check(self) -> None:
        """Raise HeartbeatLost (once) when a rank that was beating has been silent longer than the limit."""
        now = time.monotonic()
        with self._lock:
            if self.problem is not None or (limit := self._overdue(now)) is None:
                return
            self.silent = self._fallen(now, limit, {})
            self.problem = self._describe(self.silent)
        check = _STARTING if self.starting else _CHECK_HOSTS
        raise HeartbeatLost(self.problem + (check if self.lost_hosts else ""))

    def fell_silent(self) -> dict[int, str]:
        """Under --on-failure shrink, instead of `check`: the ranks silent longer than the limit (rank -> host), each
        said once and watched no more, for the survivors carry on without them.

        With a silent rank past the limit go those that missed two beats: a host's ranks go silent together. A rank
        whose beats say it is frozen is left to its helper process, which ends it after as long and says so.
        """
        now = time.monotonic()
        with self._lock:
            limit = self._overdue(now)
            if limit is None:
                return {}
            silent = self._fallen(now, limit, self._frozen)
            for rank in silent:
                self._ended.add(rank)
                del self._last[rank]
            return silent

    def _overdue(self, now: float) -> float | None:
        """The limit, when a rank has been silent past it (else None); called with the lock held.

        A pause of the watcher itself (hpcdist mpirun stopped, or starved) longer than half the limit first starts
        every rank's count afresh: the beats it could not read meanwhile are no silence of the ranks.
        """
        limit = self.window
        if limit is None:
            return None
        if now - self._checked > limit / 2:
            self._last = dict.fromkeys(self._last, now)
        self._checked = now
        return limit if any(now - last > limit for last in self._last.values()) else None

    def _fallen(self, now: float, limit: float, exempt: Mapping[int, str]) -> dict[int, str]:
        """The ranks not in `exempt` past the limit (rank -> host); with a silent one among them, also every rank
        neither frozen nor exempt that missed two beats, for a host's ranks go silent together. A frozen rank is one
        process's state, its host still beating: it takes no late beat of another rank with it."""
        past = {rank for rank, last in self._last.items() if now - last > limit}
        one_silent = any(rank not in self._frozen for rank in past)
        return {
            rank: self._hosts[rank]
            for rank, last in self._last.items()
            if rank not in exempt
            and (rank in past or (one_silent and rank not in self._frozen and now - last > limit / 3))
        }

    def _limit_text(self) -> str:
        """'30 s', or '300 s while the job started'."""
        return f"{self.window or 0:g} s" + (" while the job started" if self.starting else "")

    def silence(self, rank: int) -> str:
        """How `rank` fell silent, in a few words: 'no heartbeat for 30 s', 'frozen: stopped (state T) for 30 s'."""
        frozen, limit = self._frozen.get(rank), self._limit_text()
        return f"frozen: {frozen} for {limit}" if frozen else f"no heartbeat for {limit}"

    def _describe(self, silent: dict[int, str]) -> str:
        """What fell silent, per host: 'host n2 lost: no heartbeat from ranks 2-3 for 30 s'.

        A host with other ranks still beating is not lost: 'rank 1 on n1 silent: no heartbeat for 30 s'. Past
        _MOST_HOSTS hosts of either kind the rest are counted: '1,245 more hosts lost (ranks 40-9999 …)'.
        """
        stopped = [rank for rank in sorted(silent) if rank in self._frozen]
        frozen = [f"rank {rank} on {silent[rank]} {self.silence(rank)}" for rank in stopped[:_MOST_HOSTS]]
        ranks_on: dict[str, list[int]] = {}
        for rank, host in sorted(silent.items()):
            if rank not in self._frozen:
                ranks_on.setdefault(host, []).append(rank)
        beating = {self._hosts[rank] for rank in self._last if rank not in silent or rank in self._frozen}
        lost = [host for host in sorted(ranks_on) if host not in beating]
        partial = [host for host in sorted(ranks_on) if host in beating]
        self.lost_hosts.extend(lost)
        limit = self._limit_text()
        parts = frozen + [
            f"host {host} lost: no heartbeat from {ranks_text(ranks_on[host])} for {limit}"
            for host in lost[:_MOST_HOSTS]
        ]
        if lost[_MOST_HOSTS:]:
            rest = [rank for host in lost[_MOST_HOSTS:] for rank in ranks_on[host]]
            parts.append(f"{len(lost) - _MOST_HOSTS:,} more hosts lost ({ranks_text(rest)}): no heartbeat for {limit}")
        parts += [
            f"{ranks_text(ranks_on[host])} on {host} silent: no heartbeat for {limit}" for host in partial[:_MOST_HOSTS]
        ]
        if partial[_MOST_HOSTS:]:
            rest = [rank for host in partial[_MOST_HOSTS:] for rank in ranks_on[host]]
            parts.append(
                f"{ranks_text(rest)} on {len(partial) - _MOST_HOSTS:,} more hosts silent: no heartbeat for {limit}"
            )
        return "; ".join(parts)
