"""The progress thread: completes the futures of works nobody waits on (DDP waits from C++).

MPI moves data only while someone calls into it, so a Work whose future was requested is handed to
one daemon thread that tests it with back-off sleeps (10 µs up to 1 ms), fails it at the group's
timeout, and settles its future. This needs MPI_THREAD_MULTIPLE, mpi4py's default.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ..waits import Backoff
from .errors import CollectiveError

__all__ = ["PROGRESS"]


class _Progress:
    """One daemon thread that drives handed-off works to completion and settles their futures."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._works: list[Any] = []
        self._thread: threading.Thread | None = None

    def add(self, work: Any) -> None:
        work._event = threading.Event()
        if threading.current_thread() is self._thread:
            # A future's callback, run by this thread as it settles a work, asked for another work's future and
            # may wait on it (PowerSGD's hook does): nobody else would drive that work, so it is driven here.
            # Measured with MPICH 5.0.2, whose small iallreduce is not done at its first test as Open MPI's are:
            # without this, test_powersgd_hook_rank_1 hung.
            backoff = Backoff(10e-6, 1e-3)
            while not _finished(work, time.monotonic()):
                backoff.pause()
            work._settle()
            return
        with self._lock:
            self._works.append(work)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hpcdist-mpi-progress", daemon=True)
                self._thread.start()
            self._lock.notify()

    def _run(self) -> None:
        """Poll every handed-off work; back off while none finishes, start over when one does."""
        backoff = Backoff(10e-6, 1e-3)
        while True:
            with self._lock:
                while not self._works:
                    self._lock.wait()
                works = list(self._works)
            now = time.monotonic()
            finished = [work for work in works if _finished(work, now)]
            if finished:
                with self._lock:
                    for work in finished:
                        self._works.remove(work)
                for work in finished:
                    work._settle()
                backoff.reset()
            else:
                backoff.pause()


def _finished(work: Any, now: float) -> bool:
    """Whether `work` completed, failed or ran out of time (then it is failed); an error in MPI fails it."""
    try:
        return bool(work._poll() or work._expired(now))
    except BaseException as exc:  # noqa: BLE001 - never let the thread die silently
        print(f"hpcdist.mpi_backend progress thread: {exc!r}", file=sys.stderr)
        work._fail(CollectiveError(str(exc)))
        return True


PROGRESS = _Progress()
