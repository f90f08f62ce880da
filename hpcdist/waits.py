"""Waiting without hanging: one back-off, one polling loop with a deadline, one reading of timeouts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .errors import RendezvousTimeout, WaitTimeout
from .hosts import this_host

__all__ = ["Backoff", "as_seconds", "poll_until", "wait_peers"]

_YIELD = 0.1  # seconds a start-up wait yields the core before it sleeps


class Backoff:
    """Pauses between polls: spin for `spin` s, then yield the CPU until `yielding` s, then sleep doubling
    from `tmin` to `tmax` (mpi4py's futures `Backoff`, with the first two phases for microsecond waits)."""

    def __init__(self, tmin: float = 1e-4, tmax: float = 0.01, *, spin: float = 0.0, yielding: float = 0.0) -> None:
        self.tmin, self.tmax, self.spin, self.yielding = tmin, tmax, spin, yielding
        self.reset()

    def reset(self) -> None:
        """Start again from the first phase (after progress was made)."""
        self.began = time.monotonic()
        self.tval = 0.0

    def pause(self) -> None:
        """Wait once, as long as the time spent so far calls for."""
        if self.spin or self.yielding:
            waited = time.monotonic() - self.began
            if waited < self.spin:
                return
            if waited < self.yielding:
                os.sched_yield()  # not time.sleep(0): that sleeps for the timer slack, ~50 µs on Linux
                return
        self.tval = self.upcoming()
        time.sleep(self.tval)

    def upcoming(self) -> float:
        """How long the next sleep will be (what a caller may announce before it pauses)."""
        return min(self.tmax, max(self.tmin, self.tval * 2))


def poll_until(
    test: Callable[[], bool],
    deadline: float | None,
    explain: Callable[[], str],
    *,
    backoff: Backoff | None = None,
    error: Callable[[str], BaseException] = WaitTimeout,
) -> None:
    """Call `test` until it returns True, pausing by `backoff` between calls.

    Raises:
        WaitTimeout (or what `error` makes of the message): `time.monotonic()` passed `deadline` (None: no
        deadline) first; the message is `explain()`, which says who waited for what.
    """
    backoff = backoff or Backoff()
    while not test():
        if deadline is not None and time.monotonic() > deadline:
            raise error(explain())
        backoff.pause()


def wait_peers(
    comm: Any, request: Any, timeout: float, what: str, setting: str, meanwhile: Callable[[], None] | None = None
) -> None:
    """Poll a request of `comm`'s ranks' start-up (an mpi4py Request) until done, calling `meanwhile` between polls.

    For its first `_YIELD` seconds a poll yields the core rather than sleeping, as MPI's own blocking calls do when
    ranks outnumber cores; then it pauses from 10 µs to 10 ms. Ranks in step finish a collective within that time,
    and a sleeping rank would hold up each level of the collective's tree by its pause (measured, 9 collectives
    after `MPI_Init` on 2 cores: 0.65-0.76 s at 16 ranks and 3.6 s at 64 with pauses, 0.47 s and 2.5 s yielding,
    the same CPU).

    Raises:
        RendezvousTimeout: not done within `timeout` s; the message names this rank, `what` it waited for, and the
            `setting` that gives start-up more time.
    """

    def test() -> bool:
        if meanwhile is not None:
            meanwhile()
        return bool(request.Test())

    poll_until(
        test,
        time.monotonic() + timeout,
        lambda: (
            f"rank {comm.rank} of {comm.size} on {this_host()} waited {timeout:g} s for {what}; a rank may "
            f"have died or hung before reaching it (raise {setting} if start-up is just slow)"
        ),
        backoff=Backoff(1e-5, 0.01, yielding=_YIELD),
        error=RendezvousTimeout,
    )


def as_seconds(value: object) -> float | None:
    """A positive timeout in seconds from a number or a timedelta; None when unset (None, zero or negative).

    torch passes -1 ms for "no timeout given", hence negative means unset.
    """
    from datetime import timedelta  # torch's timeouts: loaded with torch

    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)  # type: ignore[arg-type]
    return seconds if seconds > 0 else None
