"""torch's key-value store over MPI: rank 0 keeps the keys and serves them from one thread, so no TCP port opens.

    store = MPIStore(MPI.COMM_WORLD, timeout=300)       # collective: every rank, at the same point
    dist.init_process_group("mpi4py", store=store, rank=r, world_size=n)

Every rank sends its request (a pickled tuple) to rank 0 over a private duplicate of the communicator and polls for
the answer on a tag of its own; rank 0's own requests go to the server thread (runtime/storeserver.py) through a
queue. The server holds `get`/`wait` until their keys exist or their timeout passes, then answers with an error
naming the keys and the rank that waited; a client gives up a grace period after that, in case rank 0 is gone. The
server thread calls MPI beside the program's own calls, so MPI must run MPI_THREAD_MULTIPLE (`threads_ok`), and
rank 0's program must not wait in a call that holds the GIL for ranks that wait on the store
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
import itertools
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from mpi4py import MPI

from ..errors import WaitTimeout
from ..waits import Backoff, as_seconds, poll_until
from .storeserver import REQUEST, SERVER, Server, names

__all__ = ["MPIStore", "StoreError", "threads_ok"]

_TAGS = 30000  # answer tags cycle through 1..30000, within every MPI's MPI_TAG_UB (at least 32767)
_GRACE = 30.0  # seconds a client waits past its own timeout for rank 0's answer before it blames rank 0
_CLOSE_WAIT = 10.0  # seconds close waits for the other ranks to close too

StoreError: type[RuntimeError] = dist.DistStoreError  # what torch's own stores raise on a timeout


def threads_ok() -> bool:
    """Whether MPI runs MPI_THREAD_MULTIPLE, which the server thread beside the program's MPI calls needs."""
    return bool(MPI.Query_thread() >= MPI.THREAD_MULTIPLE)


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
        self._server = Server(self._comm) if self._rank == SERVER else None
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
        return self._call("multi_get", (list(keys),), names(keys), self._timeout())

    def multi_set(self, keys: Sequence[str], values: Sequence[bytes | str]) -> None:
        """Set each of `keys` to its value."""
        if len(keys) != len(values):
            raise ValueError(f"multi_set got {len(keys)} keys but {len(values)} values")
        self._call("multi_set", (list(keys), [_bytes(value) for value in values]), names(keys))

    def check(self, keys: Sequence[str]) -> bool:
        """Whether every one of `keys` is set, without waiting."""
        return self._call("check", (list(keys),), names(keys))

    def wait(self, keys: Sequence[str], timeout: timedelta | None = None) -> None:
        """Wait until every one of `keys` is set, up to `timeout` (default: the store's)."""
        self._call("wait", (list(keys),), names(keys), as_seconds(timeout) or self._timeout())

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
        self._server = Server(self._comm, table) if self._rank == SERVER else None
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
        self, server: Server, op: str, args: tuple[Any, ...], seconds: float, limit: float, what: str
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
        send = comm.isend((op, tag, args, seconds), SERVER, REQUEST)
        deadline = time.monotonic() + limit
        backoff = Backoff(1e-5, 0.002, yielding=1e-3)
        message = comm.improbe(SERVER, tag)
        while message is None:
            if time.monotonic() > deadline:
                raise StoreError(
                    f"rank {self._rank} on {socket.gethostname()} had no answer from the MPI store on rank 0 to "
                    f"{op} {what} in {limit:g} s: rank 0 may be gone or hung"
                )
            backoff.pause()
            message = comm.improbe(SERVER, tag)
        answer = message.recv()
        send.wait()
        return answer


def _poll(request: Any, seconds: float, explain: Callable[[], str]) -> None:
    """Wait for an MPI request, the GIL free; after `seconds`, raise WaitTimeout with `explain()`."""
    poll_until(request.Test, time.monotonic() + seconds, explain, backoff=Backoff(1e-4, 0.01))


def _bytes(value: bytes | str) -> bytes:
    """A value as bytes: torch passes bytes, Python callers often str."""
    return value.encode() if isinstance(value, str) else bytes(value)
