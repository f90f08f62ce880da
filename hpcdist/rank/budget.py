"""How much of a rank's output its tagger forwards to the launcher: a byte budget refilled at a steady rate (pure).

`hpcdist mpirun` sets every rank's rate (the contract's `output_rate`) to the OUTPUT_RATE setting, else to its share
of what one launcher can take (`settings.output_rate`): 8 MiB/s over the job, at least 1 KiB/s a rank. A rank may
spend BURST_SECONDS of its rate at once (at least MIN_BURST bytes); a line that finds the budget spent is not
forwarded, and when output flows again (or the rank ends) the tagger says in one line how many lines and bytes it
held back and where they are kept in full: the rank's log with --log-dir, which keeps every line. Event lines are
never held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["BURST_SECONDS", "MIN_BURST", "Budget"]

BURST_SECONDS = 10.0  # a quiet rank may then print this many seconds' worth at once
MIN_BURST = 16 << 10


class Budget:
    """A token bucket of bytes: `take` says whether a line fits; what did not is counted until `held_back` says so."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = max(float(MIN_BURST), rate * BURST_SECONDS)
        self._clock = clock
        self._left = self.burst
        self._at = clock()
        self._said = -BURST_SECONDS  # when what was held back was last said
        self.lines = 0  # held back since the last `held_back`
        self.bytes = 0

    def take(self, size: int) -> bool:
        """Spend `size` bytes if the budget has them (refilled at `rate` since the last call); else count them."""
        now = self._clock()
        self._left = min(self.burst, self._left + (now - self._at) * self.rate)
        self._at = now
        if size <= self._left:
            self._left -= size
            return True
        self.lines += 1
        self.bytes += size
        return False

    def held_back(self, kept: str, final: bool = False) -> bytes:
        """The line that says what was held back since it was last said, and where it is `kept`: b"" if nothing,
        or (unless `final`) when it was said less than BURST_SECONDS ago, so a steady flood gets one line in ten s."""
        now = self._clock()
        if not self.lines or (not final and now - self._said < BURST_SECONDS):
            return b""
        self._said = now
        said = (
            f"hpcdist: this rank printed faster than its {self.rate:,.0f} bytes/s to the launcher: {self.lines:,} "
            f"line{'s' if self.lines > 1 else ''} ({self.bytes:,} bytes) not shown; {kept}"
        )
        self.lines = self.bytes = 0
        return said.encode()
