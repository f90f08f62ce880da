"""Per-rank deadline watchdog: a stuck test ends the whole MPI job, after rank 0 printed every rank's stack.

Each rank runs one daemon thread. At a test's deadline (or when another rank asks) it writes this rank's
Python stacks to `<dir>/rank-N.stack` (ranks on one host, or a shared filesystem) and sends them to rank 0
over a dedicated communicator with non-blocking operations (when MPI runs THREAD_MULTIPLE). Rank 0 waits
`grace` seconds for the others, prints what it got, names the ranks that did not answer, and calls
MPI_Abort. A rank stuck in a C call that holds the GIL cannot run this thread: faulthandler's own C
thread dumps its stacks to `<dir>/rank-N.faulthandler` one second after the deadline, and rank 0 reads
that file instead. If rank 0 itself cannot act, every other rank that answered aborts the job on its
own after a fallback delay, so the job always ends.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..abort import abort_job
from ..errors import WaitTimeout
from ..waits import Backoff, poll_until

__all__ = ["DEADLINE_EXIT", "DeadlineThread", "format_stacks"]

DEADLINE_EXIT = 70  # the MPI_Abort code after a deadline (EX_SOFTWARE)
_POLL = 0.2
_BACKSTOP = 1.0  # faulthandler's C-level dump, this long after the deadline
_STACK_TAG, _REQUEST_TAG = 31001, 31002
_INTERNAL = (os.sep + "_pytest" + os.sep, os.sep + "pluggy" + os.sep)


def format_stacks(skip: int | None = None) -> str:
    """Every Python thread's stack in this process, main thread first, pytest/pluggy frames folded."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    frames = sorted(sys._current_frames().items(), key=lambda item: item[0] != main)
    parts = []
    for ident, frame in frames:
        if ident == skip:
            continue
        parts.append(f"Thread {names.get(ident, ident)!s} (most recent call last):")
        folded = 0
        for entry in traceback.extract_stack(frame):
            if any(mark in entry.filename for mark in _INTERNAL):
                folded += 1
                continue
            if folded:
                parts.append(f"  … {folded} pytest/pluggy frame{'s' if folded > 1 else ''} …")
                folded = 0
            parts.append(f'  File "{entry.filename}", line {entry.lineno}, in {entry.name}')
            if entry.line:
                parts.append(f"    {entry.line.strip()}")
    return "\n".join(parts)


class DeadlineThread:
    """One rank's deadline thread; `arm` before a test, `disarm` after, `where` says what the rank does."""

    def __init__(
        self,
        rank: int,
        size: int,
        directory: str,
        comm: Any,
        out_fd: int,
        *,
        grace: float = 4.0,
        abort: Callable[[int], None] | None = None,
    ) -> None:
        self.rank, self.size, self.dir = rank, size, Path(directory)
        self.comm = comm  # a duplicated communicator for stacks and requests, or None: files only
        self.out_fd, self.grace = out_fd, grace
        self.where = "between tests"
        self._abort = abort or abort_job
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._seconds, self._label = 0.0, ""
        self._stopped = False
        self._sends: list[Any] = []
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.dir / f"rank-{rank}.faulthandler", "w")  # noqa: SIM115 (kept for faulthandler)
        self._thread = threading.Thread(target=self._run, name="hpcdist-mpi-deadline", daemon=True)
        self._thread.start()

    def arm(self, seconds: float, label: str) -> None:
        """Start the deadline of one test."""
        with self._cond:
            self._deadline, self._seconds, self._label = time.monotonic() + seconds, seconds, label
            self._cond.notify()
        faulthandler.dump_traceback_later(seconds + _BACKSTOP, exit=False, file=self._fh)

    def disarm(self) -> None:
        """The test ended in time."""
        faulthandler.cancel_dump_traceback_later()
        with self._cond:
            self._deadline = None

    def close(self) -> None:
        """Stop the thread and remove this rank's files."""
        self.disarm()
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=2)
        self._fh.close()
        for name in (f"rank-{self.rank}.faulthandler", f"rank-{self.rank}.stack"):
            (self.dir / name).unlink(missing_ok=True)

    # --- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                self._cond.wait(_POLL)
                deadline = self._deadline
            if deadline is not None and time.monotonic() >= deadline:
                reason = (
                    f"rank {self.rank} hit the {self._seconds:g} s deadline of {self._label} "
                    f"(--mpi-deadline / @pytest.mark.mpi_deadline)"
                )
                self._post_request(reason)
                break
            requested = self._requested()
            if requested:
                reason = requested
                break
        self._answer()
        if self.rank != 0:
            time.sleep(self.grace + 5.0)  # rank 0 should have aborted the job by now; if not, do it here
        self._report_and_abort(reason)

    def _post_request(self, reason: str) -> None:
        """Ask every rank for its stack: a request file, and a message to each rank."""
        try:
            with open(self.dir / "request", "x") as f:
                f.write(reason)
        except OSError:
            pass
        if self.comm is not None:
            self._sends += [
                self.comm.isend(reason, dest=r, tag=_REQUEST_TAG) for r in range(self.size) if r != self.rank
            ]

    def _requested(self) -> str | None:
        """Another rank's request for stacks, if one came."""
        if self.comm is not None:
            msg = self.comm.improbe(tag=_REQUEST_TAG)
            if msg is not None:
                return str(msg.recv())
        try:
            return (self.dir / "request").read_text() or "another rank hit its deadline"
        except OSError:
            return None

    def _own_stack(self) -> str:
        host = socket.gethostname()
        return f"rank {self.rank} on {host} (pid {os.getpid()}), {self.where}:\n" + format_stacks(
            skip=threading.get_ident()
        )

    def _answer(self) -> None:
        """Write this rank's stack to its file, and send it to rank 0."""
        text = self._own_stack()
        tmp = self.dir / f"rank-{self.rank}.stack.tmp"
        try:
            tmp.write_text(text)
            tmp.replace(self.dir / f"rank-{self.rank}.stack")
        except OSError:
            pass
        if self.comm is not None and self.rank != 0:
            self._sends.append(self.comm.isend((self.rank, text), dest=0, tag=_STACK_TAG))

    def _collect(self) -> dict[int, str]:
        """Every rank's stack that arrives within `grace` seconds (files, then messages, then faulthandler)."""
        stacks = {self.rank: self._own_stack()}

        def arrived() -> bool:
            for r in range(self.size):
                if r not in stacks:
                    with contextlib.suppress(OSError):  # not written yet
                        stacks[r] = (self.dir / f"rank-{r}.stack").read_text()
            while self.comm is not None and (msg := self.comm.improbe(tag=_STACK_TAG)) is not None:
                r, text = msg.recv()
                stacks.setdefault(r, text)
            return len(stacks) == self.size

        with contextlib.suppress(WaitTimeout):  # who did not answer is named in the report
            poll_until(arrived, time.monotonic() + self.grace, str, backoff=Backoff(0.1, 0.1))
        for r in range(self.size):
            if r not in stacks:
                try:
                    dump = (self.dir / f"rank-{r}.faulthandler").read_text().strip()
                except OSError:
                    dump = ""
                if dump:
                    kept = [line for line in dump.splitlines() if not any(mark in line for mark in _INTERNAL)]
                    stacks[r] = (
                        f"rank {r} (its Python thread never ran: stuck in a C call holding the GIL; "
                        f"faulthandler's dump, pytest/pluggy frames left out):\n" + "\n".join(kept)
                    )
        return stacks

    def _report_and_abort(self, reason: str) -> None:
        stacks = self._collect()
        missing = [r for r in range(self.size) if r not in stacks]
        bar = "=" * 30
        lines = [
            f"\n{bar} hpcdist: MPI test deadline {bar}",
            reason,
            f"stacks of {len(stacks)} of {self.size} ranks, gathered by rank {self.rank}:",
        ]
        for r in sorted(stacks):
            lines.append(f"--- rank {r} ---")
            lines += [f"[rank {r}] {line}" for line in stacks[r].splitlines()]
        if missing:
            lines.append(
                f"ranks that did not answer within {self.grace:g} s: {', '.join(map(str, missing))} "
                f"(stuck holding the GIL, or on another host without a shared {self.dir.parent} "
                "and without MPI_THREAD_MULTIPLE)"
            )
        lines.append(f"hpcdist: aborting the MPI job (MPI_Abort {DEADLINE_EXIT}) so it does not hang\n")
        data = "\n".join(lines).encode("utf-8", "replace")
        try:
            while data:
                data = data[os.write(self.out_fd, data) :]
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)  # the job ends now: nobody cleans up after MPI_Abort
        self._abort(DEADLINE_EXIT)
