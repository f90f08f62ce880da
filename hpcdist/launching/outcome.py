"""How one mpirun launch ended: its status, the ranks that failed and how, said at any number of ranks (pure)."""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping

from ..ranklist import by_host, ranks_text
from ..records import field, record

__all__ = [
    "BLAMED",
    "BLAMED_HOWS",
    "LOST_HOST_STATUS",
    "MOST_NAMED",
    "USAGE_STATUS",
    "VANISHED",
    "LaunchOutcome",
]

LOST_HOST_STATUS = 1  # hpcdist mpirun's status when mpirun returned 0 although a host was lost
USAGE_STATUS = 2  # hpcdist's (and argparse's) status for a usage error
MOST_NAMED = 4  # failed ranks named one by one (and groups of the rest shown) before the others are counted
# How a rank ended that its tagger saw vanish. MPICH's Hydra names no rank when one is killed: its banner's PID
# is often another rank's, killed in its clean-up (measured with MPICH 5.0.2).
VANISHED = "killed or exited abruptly"
# How a rank that the others waited for is named when every failure was a casualty (see blame.blamed):
BLAMED = {"finished": "finished its program", "idle": "was in no communication call", "uninit": "never initialised"}
BLAMED_HOWS = tuple(BLAMED.values())  # how such a rank ended: no failure of its own
_UNFAILED = ("killed", "frozen", *BLAMED_HOWS)  # how-texts that are no "failed with …"


@record(frozen=True)
class LaunchOutcome:
    """How one mpirun launch ended: its status and what hpcdist mpirun learnt from its output."""

    status: int
    lost_hosts: tuple[str, ...] = ()
    ready: frozenset[int] = frozenset()  # the ranks that said their process group is initialised
    world_size: int | None = None  # as the ready ranks said
    failed: Mapping[int, str] = field(default_factory=dict)  # rank -> how it ended, e.g. "killed by SIGKILL"
    hosts: Mapping[int, str] = field(default_factory=dict)  # rank -> its host, where known
    signals: tuple[int, ...] = ()  # signals hpcdist mpirun itself received (and passed on) during the launch
    after_peer: frozenset[int] = frozenset()  # failed ranks that were casualties of another's failure (consequences)
    usage: str | None = None  # a usage error a rank told: the job's one message, status 2
    ended: Mapping[int, str] = field(default_factory=dict)  # rank -> how, ranks the job's end ended ("": unheard)

    def as_dict(self) -> dict[str, object]:
        """This outcome for tools: what failed first, how each failed rank ended and where, what else ended it."""
        return {
            "exit_status": self.status,
            "first_failure": self.causes(),
            "failed": {str(rank): {"host": self.hosts.get(rank), "how": how} for rank, how in self.failed.items()},
            "ended_by_the_launcher": sorted(self.ended),
            "lost_hosts": list(self.lost_hosts),
            "signals": [signal.Signals(sig).name for sig in self.signals],
            "usage_error": self.usage,
            "ready": sorted(self.ready),
        }

    def causes(self) -> list[int]:
        """The failed ranks that began the failure, in `failed`'s order (the launch's: by when each rank said it
        failed, by its own clock, then as heard): every one but those that failed after a peer's loss, unless all
        did (then all). A rank known only from the launcher's report of its MPI_Abort comes after the ranks that said
        when they failed, whatever its number: under load, a peer's MPI ended by its failure was heard first."""
        first = [rank for rank in self.failed if rank not in self.after_peer]
        return first or list(self.failed)

    def failures(self, ranks: Iterable[int] | None = None) -> str:
        """'rank 1 on n1 killed by SIGKILL; rank 3 failed with exit code 2' for `ranks` (default: every known one,
        those that failed after a peer's loss last).

        The first MOST_NAMED are named one by one; the rest are grouped by how they ended, by host, the first
        few ranges then a count: '…; ranks 4-9999 on 1,249 hosts failed with exit code 1'.
        """
        if ranks is None:
            ranks = sorted(self.failed, key=lambda rank: (rank in self.after_peer, rank))
        listed = [rank for rank in ranks if rank in self.failed]
        named = [self._failure(rank, f"rank {rank}", self.hosts.get(rank)) for rank in listed[:MOST_NAMED]]
        groups: dict[str, list[int]] = {}
        for rank in listed[MOST_NAMED:]:
            groups.setdefault(self.failed[rank], []).append(rank)
        shown = list(groups.items())[:MOST_NAMED]
        named += [self._failure(group[0], by_host(group, self.hosts)) for _, group in shown]
        others = sum(len(group) for group in list(groups.values())[MOST_NAMED:])
        if others:
            named.append(
                f"{others:,} more rank{'s' if others > 1 else ''} failed in {len(groups) - MOST_NAMED:,} other ways"
            )
        return "; ".join(named)

    def _failure(self, rank: int, who: str, host: str | None = None) -> str:
        """How `rank` ended, said of `who` (the rank, or its group), on `host` where known."""
        how = self.failed[rank]
        where = f" on {host}" if host else ""
        return f"{who}{where} {how if how.startswith(_UNFAILED) else 'failed with ' + how}"

    def ended_line(self) -> str:
        """'ranks 0-3,6-7 on n1, n2, n4 were ended by the launcher (killed by SIGTERM)': the ranks `ended` holds, in
        one line, grouped by how they ended and by host, the first few ranges then a count ('' if none)."""
        groups: dict[str, list[int]] = {}
        for rank, how in sorted(self.ended.items()):
            groups.setdefault(how, []).append(rank)
        parts = [
            f"{by_host(ranks, self.hosts)} {'was' if len(ranks) == 1 else 'were'} ended by the launcher"
            + (f" ({how})" if how else "")
            for how, ranks in list(groups.items())[:MOST_NAMED]
        ]
        others = sum(len(ranks) for ranks in list(groups.values())[MOST_NAMED:])
        if others:
            parts.append(f"{others:,} more ranks ended in {len(groups) - MOST_NAMED:,} other ways")
        return "; ".join(parts)

    def headline(self) -> str:
        """'first failure: rank 2 on n1 failed with exit code 1; then ranks 0,3 failed after it' ('' if none)."""
        causes = self.causes()
        if not causes:
            return ""
        after = [rank for rank in self.failed if rank not in causes]
        then = f"; then {ranks_text(after)} failed after it" if after else ""
        return f"first failure: {self.failures(causes)}{then}"
