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

    def __init__(self, np: int | None = None, spares: int = 0) -> None:
        self.np = np  # the job's ranks as launched, when the ranks do not say (`world=`), its spares included
        self.spares = spares  # the last ranks launched wait idle to take lost ranks' places (--spares)
        self.lost: dict[int, str] = {}  # rank -> how it was lost, in the order heard
        self._news: list[str] = []
        self._lock = threading.Lock()

    def lose(self, ranks: Mapping[int, str], hosts: Mapping[int, str], size: int | None = None) -> None:
        """Note ranks lost (rank -> how, e.g. 'failed (exit code 3)'); those not heard of before make one line.

        'hpcdist: rank 2 on n1 failed (killed by SIGKILL); 3 ranks carry on (--on-failure shrink)'; with spares, the
        ranks that train on, the spares among them and those left. `size`: the job's ranks, when the watch was not
        told them.
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
            self._news.append(f"hpcdist: {said}; {self._carry(size or self.np)} (--on-failure shrink)")

    def _carry(self, total: int | None) -> str:
        """Who goes on after the losses so far, of `total` ranks launched: '3 ranks carry on', or with spares '4 ranks
        carry on, a spare among them in a lost rank's place; no spare left'."""
        if total is None:
            return "the others carry on"
        actives = total - self.spares  # the spares are the last ranks launched
        lost_spares = sum(1 for rank in self.lost if rank >= actives)
        lost_actives = len(self.lost) - lost_spares
        joined = min(self.spares - lost_spares, lost_actives)
        training, waiting = actives - lost_actives + joined, self.spares - lost_spares - joined
        carry = (
            "no rank is left"
            if training <= 0
            else f"{training} ranks carry on"
            if training > 1
            else "1 rank carries on"
        )
        if not self.spares or training <= 0:
            return carry
        if joined:
            carry += (
                ", a spare among them in a lost rank's place"
                if joined == 1
                else f", {joined} spares among them in lost ranks' places"
            )
        return f"{carry}; {'no spare' if not waiting else '1 spare' if waiting == 1 else f'{waiting} spares'} left"

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
