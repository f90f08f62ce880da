"""Work objects for MPI requests: polling with a deadline, futures, and errors that are never lost.

A Work holds its MPI request(s) and every tensor MPI reads or writes, so no buffer is freed while MPI
still uses it. `wait` tests the request first, spins briefly, then yields and backs off, and raises
`CollectiveTimeout` once the group's timeout has passed. `get_future` on a pending Work hands it to a
single progress thread, which completes the torch Future even if nobody calls `wait` (DDP waits on
futures from C++).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from mpi4py import MPI

from ..settingtable import TIMEOUT
from ..waits import Backoff, as_seconds, poll_until
from . import lost, record
from .errors import CollectiveTimeout
from .progress import PROGRESS

__all__ = ["DONE", "MPIWork"]

_SPIN = 50e-6  # seconds of pure Test spinning before yielding the CPU
_YIELD = 0.02  # then Test + sched_yield until this much time has passed, then back-off sleeps
_SLEEP = (20e-6, 2e-3)  # the back-off sleeps, first and longest
_LOOK = 0.01  # seconds between a ring's looks, under ULFM, at whether its communicator was revoked or a member failed
_testall = MPI.Request.Testall


class MPIWork(dist._Work):
    """One operation in flight: its MPI request(s), kept-alive buffers, and what to do at the end."""

    def __init__(
        self,
        group: Any,
        name: str,
        req: Any,
        keep: Any,
        result: list[torch.Tensor],
        finish: Callable[[], None] | None = None,
        steps: Iterator[Any] | None = None,
        status: Any = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__()
        self._group = group
        self._name = name
        self._req = req
        self._keep = keep
        self._result = result
        self._finish = finish
        self._steps = steps
        # a ring under ULFM: when its wait next looks whether a member failed (lost.interrupted); else None
        self._look = time.monotonic() + _LOOK if steps is not None and group._survivors else None
        self._status = status
        self._start = time.monotonic()
        self._timeout = timeout or group._timeout
        self._done = False
        self._error: BaseException | None = None
        self._observed = False
        self._future: torch.futures.Future | None = None
        self._event: threading.Event | None = None  # set when the progress thread owns this work
        self._call: record.Issued | None = None  # its Call in the ledger (record.py), when recorded

    # -- progress -------------------------------------------------------------------------------
    def _poll(self) -> bool:
        """Test the request(s); on completion run the finishing step. True when done (or failed)."""
        if self._done:
            return True
        try:
            while True:
                req = self._req
                if type(req) is list:
                    if req and not _testall(req):
                        if self._look is not None:
                            self._look_for_failures()
                        return False
                elif req is not None and not (req.Test(self._status) if self._status is not None else req.Test()):
                    return False
                if self._steps is None:
                    break
                nxt = next(self._steps, None)
                if nxt is None:
                    self._steps = None
                    break
                self._req = nxt
            if self._finish is not None:
                self._finish()
        except Exception as exc:  # noqa: BLE001 - MPI errors, truncation, a failed finishing step
            self._fail(self._group._failure(self._name, exc))
            return True
        self._done = True
        self._keep = None
        record.ended(self._call)
        return True

    def _look_for_failures(self) -> None:
        """A ring under ULFM, every _LOOK seconds: raise MPI's error once its communicator was revoked or a member
        failed, for its pending requests may never complete then."""
        if self._look is not None and time.monotonic() > self._look:
            broken = lost.interrupted(self._group._ring_comm)
            if broken is not None:
                raise broken
            self._look = time.monotonic() + _LOOK

    def _fail(self, error: BaseException) -> None:
        """Mark this work failed; the request (if still in flight) keeps its buffers via the group."""
        self._error = error
        self._done = True
        record.ended(self._call)
        if self._req is not None and not self._is_settled():
            self._group._orphan(self)

    def _is_settled(self) -> bool:
        req = self._req
        try:
            if type(req) is list:
                return bool(_testall(req)) if req else True
            return req is None or bool(req.Test())
        except Exception:  # noqa: BLE001
            return True

    def _deadline_error(self, seconds: float) -> CollectiveTimeout:
        return CollectiveTimeout(
            f"{self._group._who()}: {self._name} on {self._group._desc} did not complete within {seconds:g} s "
            "(a timeout of the group or of wait()): check that every rank of the group made this call (with hang "
            f"forensics on, {TIMEOUT.name}'s report names a rank that is elsewhere or stuck); only if the call is "
            "just that slow, pass a larger timeout"
        )

    def _expired(self, now: float) -> bool:
        """Fail this work if the group's timeout has passed; True if so."""
        if now - self._start > self._timeout:
            self._fail(self._deadline_error(self._timeout))
            return True
        return False

    # -- the torch Work API ---------------------------------------------------------------------
    def wait(self, timeout: Any = None) -> bool:
        """Block until done.

        Raises:
            CollectiveTimeout: the operation outlived the group's timeout (the work fails) or `timeout` (it does not).
            CollectiveError: the operation failed in MPI or in its finishing step.
        """
        if not self._done:
            record.watched(self._call)
            if self._event is not None:
                self._wait_handed(as_seconds(timeout))
            else:
                self._wait_polling(as_seconds(timeout))
        if self._error is not None:
            self._observed = True
            raise self._error
        return True

    def _wait_polling(self, limit: float | None) -> None:
        """Poll until done: at the group's timeout the work fails; at `limit` (wait's own) the wait raises."""
        if self._poll():
            return
        expires = self._start + self._timeout
        deadline = expires if limit is None else min(expires, time.monotonic() + limit)
        poll_until(
            self._poll,
            deadline,
            lambda: "",
            backoff=Backoff(*_SLEEP, spin=_SPIN, yielding=_YIELD),
            error=lambda _: self._late(expires, limit),
        )

    def _late(self, expires: float, limit: float | None) -> CollectiveTimeout:
        """The error of a wait that ran out: the group's timeout fails the work, wait's own limit does not."""
        if limit is None or time.monotonic() > expires:
            error = self._deadline_error(self._timeout)
            self._fail(error)
            self._observed = True
            return error
        return self._deadline_error(limit)

    def _wait_handed(self, limit: float | None) -> None:
        event = self._event
        if event is None:  # only called once the progress thread owns this work
            raise RuntimeError("internal error: waiting on a work the progress thread does not own")
        remaining = self._timeout - (time.monotonic() - self._start) + 1.0  # the progress thread times it out
        if limit is not None and limit < remaining and not event.wait(limit):
            raise self._deadline_error(limit)
        event.wait(max(remaining, 0.0))

    def is_completed(self) -> bool:
        """True once the operation finished (successfully or not); never blocks."""
        if self._done:
            return True
        if self._event is not None:
            return False
        return self._poll()

    def is_success(self) -> bool:
        """True if the operation completed without an error."""
        return self.is_completed() and self._error is None

    def exception(self) -> BaseException | None:
        """The error this operation failed with, if any."""
        if self._error is not None:
            self._observed = True
        return self._error

    def result(self) -> list[torch.Tensor]:
        """The output tensors (after wait)."""
        self.wait()
        return self._result

    def source_rank(self) -> int:
        """For a receive: the group rank the message came from."""
        if self._status is None:
            raise RuntimeError(f"{self._name} has no source rank: only receives do")
        return self._status.Get_source()

    _source_rank = source_rank

    def synchronize(self) -> None:
        """CPU work is synchronous once waited; nothing to do for streams."""
        self.wait()

    def block_current_stream(self) -> None:
        self.wait()

    def get_future(self) -> torch.futures.Future:
        """A torch Future completed with the output tensors (or the error), even if nobody waits."""
        if self._future is None:
            self._future = torch.futures.Future()
            if self._done or self.is_completed():
                self._settle()
            else:
                record.watched(self._call)  # a future's owner waits for it (DDP does, from C++)
                PROGRESS.add(self)
        return self._future

    def _settle(self) -> None:
        """Complete the future (if any) and wake a waiter on a handed-off work."""
        fut = self._future
        if fut is not None and not fut.done():
            if self._error is not None:
                self._observed = True
                fut.set_exception(self._error)
            else:
                fut.set_result(self._result)
        if self._event is not None:
            self._event.set()

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else "done" if self._done else "pending"
        return f"<MPIWork {self._name} on {self._group._desc}: {state}>"


class _CompletedWork(dist._Work):
    """What a synchronous operation returns: already done, so waiting costs nothing."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self) -> None:
        return None

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result([])
        return fut


DONE = _CompletedWork()
