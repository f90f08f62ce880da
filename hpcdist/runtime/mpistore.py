"""torch's key-value store over MPI: rank 0 keeps the keys and serves them from one thread, so no TCP port opens.

    store = MPIStore(MPI.COMM_WORLD, timeout=300)       # collective: every rank, at the same point
    dist.init_process_group("mpi4py", store=store, rank=r, world_size=n)

Every rank sends its request (a pickled tuple) to rank 0 over a private duplicate of the communicator and polls for
the answer on a tag of its own; rank 0's own requests go to the server thread through a queue. The server polls
(with a back-off that sleeps when idle, since a blocking MPI receive spins a core in Open MPI and MPICH), answers
at once what it can, and holds `get`/`wait` until their keys exist or their timeout passes: it then answers with
an error naming the keys and the rank that waited. A client gives up a grace period after that, in case rank 0 is
gone. The server thread calls MPI beside the program's own calls, so MPI must run MPI_THREAD_MULTIPLE
(`threads_ok`), and rank 0's program must not wait in a call that holds the GIL for ranks that wait on the store
(mpi4py's calls release it, but for the hidden duplicate its first pickled collective on a communicator makes,
which the constructor makes for `comm`). `close` is collective and stops the thread, and an exit without it stops
the thread before mpi4py finalizes MPI.

torch calls the methods through its Python-store trampoline: `set`, `get`, `compare_set` take and return bytes
(Python callers may pass str), `add`, `check`, `wait`, `deleteKey`, `getNumKeys`, `clone`, `append`,
`multi_get`, `multi_set` and `has_extended_api` (torch's names for the C++ ones; the Python spellings
`delete_key` and `num_keys` are here too).
"""

from __future__ import annotations

import atexit
import contextlib
import heapq
import itertools
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from mpi4py import MPI

from ..errors import WaitTimeout
from ..records import field, record
from ..waits import Backoff, as_seconds, poll_until

__all__ = ["MPIStore", "StoreError", "threads_ok"]

_SERVER = 0  # the rank that keeps the keys
_REQUEST = 0  # the tag of every request; answers come on the tag each request names
_TAGS = 30000  # answer tags cycle through 1..30000, within every MPI's MPI_TAG_UB (at least 32767)
_GRACE = 30.0  # seconds a client waits past its own timeout for rank 0's answer before it blames rank 0
_IDLE = Backoff(tmin=1e-4, tmax=0.001)  # the server's pauses while idle (a template: its bounds)
_STOP = "stop"
_CLOSE_WAIT = 10.0  # seconds close waits for the other ranks to close too

StoreError: type[RuntimeError] = dist.DistStoreError  # what torch's own stores raise on a timeout


def threads_ok() -> bool:
    """Whether MPI runs MPI_THREAD_MULTIPLE, which the server thread beside the program's MPI calls needs."""
    return bool(MPI.Query_thread() >= MPI.THREAD_MULTIPLE)


@record(eq=False)
class _Waiter:
    """A request held by the server until its keys exist: who asked, and how to answer."""

    keys: tuple[str, ...]
    seconds: float
    answer: Callable[[bool, Any], None]
    result: Callable[[], Any]
    rank: int
    done: bool = field(default=False)


class _Server:
    """The keys, and the thread on rank 0 that answers every rank's requests."""

    def __init__(self, comm: Any, table: dict[str, bytes] | None = None) -> None:
        self.comm = comm
        self.table: dict[str, bytes] = dict(table or {})
        self.local: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.waiting: dict[str, list[_Waiter]] = {}  # by the first key each waiter still lacks
        self.deadlines: list[tuple[float, int, _Waiter]] = []  # a heap, to time out the waiters
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
                message = self.comm.improbe(MPI.ANY_SOURCE, _REQUEST, status)
                while message is not None:
                    self.doing = f"MPI_Mrecv (a request from rank {status.Get_source()})"
                    op, tag, args, seconds = message.recv()
                    source = status.Get_source()
                    self.doing = f"answering {op} for rank {source}"
                    self.safely(op, args, seconds, source, self._remote(source, tag))
                    busy = True
                    self.doing = "MPI_Improbe (looking for requests)"
                    message = self.comm.improbe(MPI.ANY_SOURCE, _REQUEST, status)
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
            self.safely(op, args, seconds, _SERVER, answer)
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
            waiter = _Waiter(keys, seconds, answer, result, rank)
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

    def hold(self, waiter: _Waiter) -> bool:
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
                f"rank {waiter.rank} waited {waiter.seconds:g} s for key(s) {_names(missing)} in the MPI store "
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


class MPIStore(dist.Store):
    """torch's Store over MPI; rank 0 of `comm` keeps the keys (see the module's docstring). Collective to make."""

    def __init__(self, comm: Any, timeout: float) -> None:
        super().__init__()
        # Every rank first, without holding the GIL (the watchdog names a rank that never comes); then in step:
        _poll(
            comm.Ibarrier(),
            timeout + _GRACE,
            lambda: (
                f"rank {comm.rank} waited {timeout + _GRACE:g} s for all {comm.size} ranks to make the MPI store "
                "(a rank that never calls init_process_group?)"
            ),
        )
        self._comm = comm.Dup()
        # mpi4py's first pickled collective on a communicator duplicates it, holding the GIL: were rank 0's program to
        # make that call while others wait on the store, the server thread could never answer. Do it now, in step.
        comm.allreduce(0)
        self._rank = self._comm.rank
        self._lock = threading.Lock()
        self._tags = itertools.count()
        self.set_timeout(timedelta(seconds=timeout))
        self._server = _Server(self._comm) if self._rank == _SERVER else None
        self._closed = False
        atexit.register(self._at_exit)

    # The store API, as torch calls it (see the module's docstring).

    def set(self, key: str, value: bytes | str) -> None:
        """Set `key` to `value`."""
        self._call("set", (key, _bytes(value)), key)

    def get(self, key: str) -> bytes:
        """The value of `key`, waiting up to the store's timeout until some rank sets it."""
        return self._call("get", (key,), key, self._timeout())

    def add(self, key: str, value: int) -> int:
        """Add `value` to the integer at `key` (0 when unset) and return the sum."""
        return self._call("add", (key, int(value)), key)

    def compare_set(self, key: str, expected_value: bytes | str, desired_value: bytes | str) -> bytes:
        """Set `key` to `desired_value` if it holds `expected_value` (or is unset and that is empty); the value now."""
        return self._call("compare_set", (key, _bytes(expected_value), _bytes(desired_value)), key)

    def append(self, key: str, value: bytes | str) -> None:
        """Append `value` to the value of `key` (made empty when unset)."""
        self._call("append", (key, _bytes(value)), key)

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        """The values of `keys`, waiting up to the store's timeout until all exist."""
        return self._call("multi_get", (list(keys),), _names(keys), self._timeout())

    def multi_set(self, keys: Sequence[str], values: Sequence[bytes | str]) -> None:
        """Set each of `keys` to its value."""
        if len(keys) != len(values):
            raise ValueError(f"multi_set got {len(keys)} keys but {len(values)} values")
        self._call("multi_set", (list(keys), [_bytes(value) for value in values]), _names(keys))

    def check(self, keys: Sequence[str]) -> bool:
        """Whether every one of `keys` is set, without waiting."""
        return self._call("check", (list(keys),), _names(keys))

    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        """Wait until every one of `keys` is set, up to `timeout` (default: the store's)."""
        self._call("wait", (list(keys),), _names(keys), as_seconds(timeout) or self._timeout())

    def delete_key(self, key: str) -> bool:
        """Remove `key`; whether it was set."""
        return self._call("delete", (key,), key)

    def num_keys(self) -> int:
        """How many keys are set."""
        return self._call("num_keys", (), "(all keys)")

    deleteKey = delete_key  # noqa: N815 - the names torch's trampoline calls
    getNumKeys = num_keys  # noqa: N815

    def clone(self) -> MPIStore:
        """This store: it is safe to use from several threads at once."""
        return self

    def has_extended_api(self) -> bool:
        """Whether append, multi_get and multi_set are native here (they are)."""
        return True

    def close(self, seconds: float = _CLOSE_WAIT) -> None:
        """Stop serving once every rank has called this (collective), or after `seconds`.

        The wait is short: a rank that fails and shuts down must not be held, and a rank that comes later, after its
        process group is gone, needs the store no more.
        """
        if self._closed:
            return
        limit = seconds
        # A rank that never closes, or one lost under --on-failure shrink (MPI_ERR_PROC_FAILED), must not hold this
        # one: stop all the same.
        with contextlib.suppress(WaitTimeout, MPI.Exception):
            _poll(self._comm.Ibarrier(), limit, str)
        self._stop(min(limit, 5.0))

    def abandon(self) -> None:
        """Stop serving at once, not collectively: ranks died (ULFM), and the survivors make a new store."""
        self._stop(0.5, tell=False)

    def rebase(self, comm: Any) -> None:
        """Serve from the survivors' `comm` from now on (collective over them), after torch's shrink_group shrank the
        world: this object and its clones alike. The keys go along where rank 0 survived (it is rank 0 of `comm`);
        else the survivors start with none (they were on the lost rank)."""
        table = self._server.table if self._server is not None else {}
        self._stop(0.5, tell=False)
        self._comm = comm.Dup()
        comm.allreduce(0)  # mpi4py's hidden duplicate for pickled calls, made in step (see __init__)
        self._rank = self._comm.rank
        self._server = _Server(self._comm, table) if self._rank == _SERVER else None
        self._closed = False

    def _at_exit(self) -> None:
        """Before mpi4py finalizes MPI: stop the server thread, if close did not."""
        self._stop(1.0)

    def _stop(self, seconds: float, tell: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.stop(seconds, tell)

    def _timeout(self) -> float:
        """The store's timeout in seconds (torch's set_timeout changes it)."""
        return as_seconds(self.timeout) or 300.0  # type: ignore[attr-defined]  # Store.timeout: a property torch does not stub

    def _call(self, op: str, args: tuple[Any, ...], what: str, seconds: float = 0.0) -> Any:
        """Send one request to rank 0 and wait for its answer; raise StoreError naming `what` on a failure."""
        if self._closed:
            raise StoreError(f"rank {self._rank}: the MPI store is closed; {op} {what} came after its close")
        limit = (seconds or self._timeout()) + _GRACE
        if self._server is not None:
            ok, value = self._local(self._server, op, args, seconds, limit, what)
        else:
            ok, value = self._remote(op, args, seconds, limit, what)
        if not ok:
            raise StoreError(value)
        return value

    def _local(
        self, server: _Server, op: str, args: tuple[Any, ...], seconds: float, limit: float, what: str
    ) -> tuple[bool, Any]:
        """Rank 0's request, through the server thread's queue."""
        done = threading.Event()
        box: list[tuple[bool, Any]] = []

        def answer(ok: bool, value: Any) -> None:
            box.append((ok, value))
            done.set()

        server.local.put((op, args, seconds, answer))
        if not done.wait(limit):
            raise StoreError(f"rank 0: the MPI store's server thread did not answer {op} {what} in {limit:g} s")
        return box[0]

    def _remote(self, op: str, args: tuple[Any, ...], seconds: float, limit: float, what: str) -> tuple[bool, Any]:
        """Another rank's request, over MPI to rank 0 and back on a tag of its own."""
        with self._lock:
            tag = 1 + next(self._tags) % _TAGS
        comm = self._comm
        send = comm.isend((op, tag, args, seconds), _SERVER, _REQUEST)
        deadline = time.monotonic() + limit
        backoff = Backoff(1e-5, 0.002, yielding=1e-3)
        message = comm.improbe(_SERVER, tag)
        while message is None:
            if time.monotonic() > deadline:
                raise StoreError(
                    f"rank {self._rank} on {socket.gethostname()} had no answer from the MPI store on rank 0 to "
                    f"{op} {what} in {limit:g} s: rank 0 may be gone or hung"
                )
            backoff.pause()
            message = comm.improbe(_SERVER, tag)
        answer = message.recv()
        send.wait()
        return answer


def _poll(request: Any, seconds: float, explain: Callable[[], str]) -> None:
    """Wait for an MPI request, the GIL free; after `seconds`, raise WaitTimeout with `explain()`."""
    poll_until(request.Test, time.monotonic() + seconds, explain, backoff=Backoff(1e-4, 0.01))


def _bytes(value: bytes | str) -> bytes:
    """A value as bytes: torch passes bytes, Python callers often str."""
    return value.encode() if isinstance(value, str) else bytes(value)


def _names(keys: Sequence[str]) -> str:
    """Keys for a message."""
    return ", ".join(repr(key) for key in keys)
