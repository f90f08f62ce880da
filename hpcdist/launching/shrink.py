"""`hpcdist mpirun --on-failure shrink`'s side of a loss: the ranks lost so far, one line per loss, the status (pure).

Under shrink a failed or lost rank (or host) does not end the job: Open MPI's ULFM tells the survivors, which shrink
and carry on. hpcdist mpirun names each loss once, as it hears of it (the rank's `failed` or `vanished` control line,
mpirun's report of a killed rank, a heartbeat that fell silent, a lost daemon), and the job's status is the
survivors': 0 when every rank that was not lost said its program ended well, although mpirun itself returns the
lost rank's status (a rank's exit code; 0 after a SIGKILL, measured with Open MPI 5.0.11).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping

from ..ranklist import by_host

__all__ = ["ShrinkWatch"]


class ShrinkWatch:
    """The ranks lost while the survivors carry on, and the lines that name them (taken by whoever prints)."""

    def __init__(self, np: int | None = None) -> None:
        self.np = np  # the job's ranks as launched, when the ranks do not say (`world=`)
        self.lost: dict[int, str] = {}  # rank -> how it was lost, in the order heard
        self._news: list[str] = []
        self._lock = threading.Lock()

    def lose(self, ranks: Mapping[int, str], hosts: Mapping[int, str], size: int | None = None) -> None:
        """Note ranks lost (rank -> how, e.g. 'failed (exit code 3)'); those not heard of before make one line.

        'hpcdist: rank 2 on n1 failed (killed by SIGKILL); 3 ranks carry on (--on-failure shrink)'. `size`: the
        job's ranks, when the watch was not told them.
        """
        with self._lock:
            new = {rank: how for rank, how in ranks.items() if rank not in self.lost}
            if not new:
                return
            self.lost.update(new)
            groups: dict[str, list[int]] = {}
            for rank, how in new.items():
                groups.setdefault(how, []).append(rank)
            said = "; ".join(f"{by_host(group, hosts)} {how}" for how, group in groups.items())
            total = size or self.np
            left = None if total is None else total - len(self.lost)
            carry = (
                "the others carry on"
                if left is None
                else "no rank is left"
                if left <= 0
                else f"{left} ranks carry on"
                if left > 1
                else "1 rank carries on"
            )
            self._news.append(f"hpcdist: {said}; {carry} (--on-failure shrink)")

    def news(self) -> list[str]:
        """The lines not taken yet, each naming one loss (printed as it happens)."""
        with self._lock:
            lines, self._news = self._news, []
            return lines

    def finished_well(self, done: Collection[int], size: int | None) -> bool:
        """Whether every rank that was not lost said its program ended well (and at least one did)."""
        total = size or self.np
        with self._lock:
            if total is None or not done:
                return False
            return all(rank in done or rank in self.lost for rank in range(total))
