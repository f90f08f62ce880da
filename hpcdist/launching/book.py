"""The watch's record of each rank: what it said of itself (its events) and what the launcher said of it (pure)."""

from __future__ import annotations

from ..events import Beat, Done, Event, Failed, Finished, Hang, Ready, Usage, Vanished
from ..families.base import RankAborted, RankKilled
from ..status import ABORTED, describe_status

__all__ = ["RankBook"]


class RankBook:
    """Per rank: ready, failed (and how), finished, done, vanished, its host, when it ended and in which call.

    The first word on a rank counts: a rank that said how it failed keeps that, whatever the launcher says after.
    """

    def __init__(self) -> None:
        self.ready: set[int] = set()
        self.world_size: int | None = None  # as the ready ranks said
        self.failed: dict[int, str] = {}  # rank -> how it ended, in the order heard
        self.after_peer: set[int] = set()  # failed ranks that were casualties: a peer had gone, or their call failed
        self.told: set[int] = set()  # failed ranks that said how themselves (their word on being a casualty stands)
        self.at: dict[int, float] = {}  # rank -> when it failed or finished, by its own clock
        self.calls: dict[int, str] = {}  # rank -> the communication call it failed in
        self.finished: list[int] = []  # ranks whose programs ended well (they then wait for the others), as heard
        self.done: set[int] = set()  # ranks that said their program ended (well, or a survivor with a status)
        self.declared: dict[int, int] = {}  # rank -> the status a survivor's program ended with (sys.exit's)
        self.hang: Hang | None = None  # the hang report's verdict (forensics/cause.py: tell_hang)
        self.hosts: dict[int, str] = {}
        self.vanished: list[int] = []  # ranks whose taggers saw them end without a word, in the order heard
        self.first_vanished: int | None = None  # the first of them, when it was heard before any failure
        self.usage: str | None = None  # the first usage error a rank told (said once for the job)
        self.usage_status = 2  # the job's status with it: 2, or 1 for survivors too few to go on
        self.told_usage: set[int] = set()  # the ranks that told one: they end with it, no loss of the job's
        self.first_failure: tuple[float, int] | None = None  # when (the watch's clock), and which, rank first failed

    def hear(self, event: Event, now: float) -> None:
        """Note what a rank said (`now`: the watch's clock, for the first failure)."""
        rank = event.rank
        if isinstance(event, Ready):
            self.ready.add(rank)
            self.world_size = event.world if event.world is not None else self.world_size
        elif isinstance(event, Failed) and rank not in self.failed:
            self.failed[rank] = event.how
            self.told.add(rank)
            self._when(rank, event.at, event.call)
            if event.after_peer or event.call:
                self.after_peer.add(rank)
        elif isinstance(event, Finished) and rank not in self.finished:
            self.finished.append(rank)
            self._when(rank, event.at, "")
        elif isinstance(event, Hang) and self.hang is None:  # its reporter's abort follows: a casualty
            self.hang = event
            self.after_peer.add(rank)
        elif isinstance(event, Done):
            self.done.add(rank)
            if event.status:
                self.declared.setdefault(rank, event.status)
        elif isinstance(event, Usage):
            if self.usage is None:
                self.usage, self.usage_status = event.message, event.status
            self.told_usage.add(rank)
        elif isinstance(event, Vanished) and rank not in self.vanished:
            if not self.vanished and not self.began():
                self.first_vanished = rank
            self.vanished.append(rank)
        if isinstance(event, (Failed, Vanished)) and self.first_failure is None:
            self.first_failure = (now, rank)
        host = getattr(event, "host", "")
        if host:
            for member in event.members() if isinstance(event, Beat) else (rank,):  # a host's beat: its ranks
                self.hosts.setdefault(member, host)

    def reported(self, seen: RankKilled | RankAborted) -> str:
        """Note what the launcher (or the rank's MPI) said of a rank: killed by a signal, or called MPI_Abort, maybe
        for a lost peer; how it ended, as noted."""
        how = describe_status(-seen.signal) if isinstance(seen, RankKilled) else ABORTED
        self.failed.setdefault(seen.rank, how)
        if isinstance(seen, RankAborted) and seen.after_peer and seen.rank not in self.told:
            self.after_peer.add(seen.rank)
        if seen.host:
            self.hosts.setdefault(seen.rank, seen.host)
        return self.failed[seen.rank]

    def began(self) -> bool:
        """Whether a failure not caused by a peer's loss, or a hang report, was heard (a rank that vanishes then is
        its sequel)."""
        return self.hang is not None or any(rank not in self.after_peer for rank in self.failed)

    def _when(self, rank: int, at: float | None, call: str) -> None:
        """Note when a rank said it failed or finished, and the call it was in."""
        if at is not None:  # a line without a time: ordered as heard
            self.at.setdefault(rank, at)
        if call:
            self.calls.setdefault(rank, call)
