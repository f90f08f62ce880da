"""The server of the store over MPI (runtime/mpistore.py): the keys, and the thread on rank 0 that answers requests.

Requests arrive as pickled tuples (operation, answer tag, arguments, seconds) on tag REQUEST from the other ranks, and
through a queue from rank 0's own program. The thread polls, with a back-off that sleeps when idle (a blocking MPI
receive spins a core in Open MPI and MPICH), answers at once what it can, and holds `get`/`wait` until their keys
exist or their timeout passes, then answers with an error naming the keys and the rank that waited. It notes which
MPI call or request it is in, so that a thread that will not stop says where it is held.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from mpi4py import MPI

from ..records import field, record
from ..waits import Backoff

__all__ = ["REQUEST", "SERVER", "Server", "names"]

SERVER = 0  # the rank that keeps the keys
REQUEST = 0  # the tag of every request; answers come on the tag each request names
_IDLE = Backoff(tmin=1e-4, tmax=0.001)  # the server's pauses while idle (a template: its bounds)
_STOP = "stop"


@record(eq=False)
class Waiter:
    """A request held by the server until its keys exist: who asked, and how to answer."""

    keys: tuple[str, ...]
    seconds: float
    answer: Callable[[bool, Any], None]
    result: Callable[[], Any]
    rank: int
    done: bool = field(default=False)


class Server:
    """The keys, and the thread on rank 0 that answers every rank's requests."""

    def __init__(self, comm: Any, table: dict[str, bytes] | None = None) -> None:
        self.comm = comm
        self.table: dict[str, bytes] = dict(table or {})
        self.local: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.waiting: dict[str, list[Waiter]] = {}  # by the first key each waiter still lacks
        self.deadlines: list[tuple[float, int, Waiter]] = []  # a heap, to time out the waiters
        self.sends: list[Any] = []  # answers on their way
        self.order = itertools.count()
        self.doing = "starting"  # the MPI call the thread is in, or the step it took last: told if it never stops
        self.since = time.monotonic()
        self.thread = threading.Thread(target=self.serve, name="hpcdist-mpistore", daemon=True)
        self.thread.start()

    def serve(self) -> None:
        """Answer requests until told to stop."""
        pause = _IDLE.tmin
        while True:
            busy = False
            status = MPI.Status()
            self.since = time.monotonic()
            try:
                self.doing = "MPI_Improbe (looking for requests)"
                message = self.comm.improbe(MPI.ANY_SOURCE, REQUEST, status)
                while message is not None:
                    self.doing = f"MPI_Mrecv (a request from rank {status.Get_source()})"
                    op, tag, args, seconds = message.recv()
                    source = status.Get_source()
                    self.doing = f"answering {op} for rank {source}"
                    self.safely(op, args, seconds, source, self._remote(source, tag))
                    busy = True
                    self.doing = "MPI_Improbe (looking for requests)"
                    message = self.comm.improbe(MPI.ANY_SOURCE, REQUEST, status)
                self.doing = "MPI_Test (the answers on their way)"
                self.expire()
                self.sends = [request for request in self.sends if not request.Test()]
            except MPI.Exception as exc:  # ranks died (ULFM, under --on-failure shrink): no more requests come
                self.refuse(f"the MPI store on rank 0 stopped: {exc}")
                return
            self.doing = "waiting for rank 0's own requests"
            pause = _IDLE.tmin if busy else min(_IDLE.tmax, pause * 2)
            try:
                item = self.local.get(timeout=pause)
            except queue.Empty:
                continue
            if item[0] == _STOP:
                return
            op, args, seconds, answer = item
            self.doing = f"answering {op} for rank 0"
            self.safely(op, args, seconds, SERVER, answer)
            pause = _IDLE.tmin

    def _remote(self, source: int, tag: int) -> Callable[[bool, Any], None]:
        """How to answer a request from rank `source` on `tag`."""

        def answer(ok: bool, value: Any) -> None:
            self.sends.append(self.comm.isend((ok, value), source, tag))

        return answer

    def safely(self, op: str, args: tuple[Any, ...], seconds: float, rank: int, answer: Callable[..., None]) -> None:
        """`handle`, answering with the error when the request is bad (say, add to a value that is no number)."""
        try:
            self.handle(op, args, seconds, rank, answer)
        except (ValueError, TypeError, KeyError) as exc:
            answer(False, f"the MPI store on rank 0 could not do {op} for rank {rank}: {exc}")

    def handle(self, op: str, args: tuple[Any, ...], seconds: float, rank: int, answer: Callable[..., None]) -> None:
        """Do one request, or hold it until its keys exist."""
        table = self.table
        if op in ("get", "wait", "multi_get"):
            keys = tuple(args[0]) if op != "get" else (args[0],)
            if op == "get":
                result: Callable[[], Any] = lambda: table[keys[0]]  # noqa: E731
            elif op == "wait":
                result = lambda: None  # noqa: E731
            else:
                result = lambda: [table[key] for key in keys]  # noqa: E731
            waiter = Waiter(keys, seconds, answer, result, rank)
            if not self.hold(waiter):
                answer(True, result())
            return
        if op == "set":
            self.put(args[0], args[1])
            answer(True, None)
        elif op == "add":
            value = int(table.get(args[0], b"0")) + args[1]
            self.put(args[0], str(value).encode())
            answer(True, value)
        elif op == "compare_set":
            key, expected, desired = args
            current = table.get(key)
            if (current is None and not expected) or (current is not None and current == expected):
                self.put(key, desired)
                answer(True, desired)
            else:
                answer(True, expected if current is None else current)
        elif op == "append":
            self.put(args[0], table.get(args[0], b"") + args[1])
            answer(True, None)
        elif op == "multi_set":
            for key, value in zip(args[0], args[1], strict=True):
                self.put(key, value)
            answer(True, None)
        elif op == "check":
            answer(True, all(key in table for key in args[0]))
        elif op == "delete":
            answer(True, table.pop(args[0], None) is not None)
        elif op == "num_keys":
            answer(True, len(table))
        else:
            answer(False, f"the MPI store on rank 0 knows no operation {op!r}")

    def hold(self, waiter: Waiter) -> bool:
        """Park `waiter` under the first key it lacks; False when it lacks none."""
        missing = next((key for key in waiter.keys if key not in self.table), None)
        if missing is None:
            return False
        self.waiting.setdefault(missing, []).append(waiter)
        heapq.heappush(self.deadlines, (time.monotonic() + waiter.seconds, next(self.order), waiter))
        return True

    def put(self, key: str, value: bytes) -> None:
        """Store a value and answer the waiters it completes."""
        self.table[key] = value
        for waiter in self.waiting.pop(key, []):
            if waiter.done:
                continue
            missing = next((k for k in waiter.keys if k not in self.table), None)
            if missing is not None:
                self.waiting.setdefault(missing, []).append(waiter)
                continue
            waiter.done = True
            waiter.answer(True, waiter.result())

    def expire(self) -> None:
        """Answer, with an error naming the keys and the rank, every waiter whose timeout has passed."""
        now = time.monotonic()
        while self.deadlines and self.deadlines[0][0] <= now:
            _, _, waiter = heapq.heappop(self.deadlines)
            if waiter.done:
                continue
            waiter.done = True
            missing = [key for key in waiter.keys if key not in self.table]
            waiter.answer(
                False,
                f"rank {waiter.rank} waited {waiter.seconds:g} s for key(s) {names(missing)} in the MPI store "
                "on rank 0, and no rank set them (a rank gone or late, or raise the timeout)",
            )

    def refuse(self, why: str) -> None:
        """Answer every held request with `why`, and the answers on their way a moment to leave."""
        for waiters in self.waiting.values():
            for waiter in waiters:
                if not waiter.done:
                    waiter.done = True
                    with contextlib.suppress(MPI.Exception):
                        waiter.answer(False, why)
        self.waiting.clear()
        deadline = time.monotonic() + 0.5
        with contextlib.suppress(MPI.Exception):
            while self.sends and time.monotonic() < deadline:
                self.sends = [request for request in self.sends if not request.Test()]

    def stop(self, seconds: float, tell: bool = True) -> None:
        """Stop the thread (it finishes the request in hand), giving the answers on their way `seconds` to leave;
        where it does not stop, `tell` says on stderr where it is stuck (ranks lost: MPI calls may hang, untold)."""
        self.local.put((_STOP,))
        self.thread.join(seconds)
        if tell and self.thread.is_alive():
            print(
                f"hpcdist: rank 0's MPI store thread did not stop in {seconds:g} s: it has been in {self.doing} for "
                f"{time.monotonic() - self.since:.1f} s, so the ranks that asked it meanwhile had no answer",
                file=sys.stderr,
                flush=True,
            )
        deadline = time.monotonic() + seconds
        while self.sends and time.monotonic() < deadline:
            self.sends = [request for request in self.sends if not request.Test()]
            time.sleep(0.001)


def names(keys: Sequence[str]) -> str:
    """Keys for a message."""
    return ", ".join(repr(key) for key in keys)
