"""`hpcdist.map(fn, items)`, and the `taskmap` workload (the seed notes' Ray example) that runs it.

`hpcdist.map` is Ray's `ray.get([f.remote(x) for x in items])` over the ranks of an MPI job.

Rank 0 coordinates: it hands out one item at a time to whichever worker asks next, and collects the
results in item order. Ranks 1..N-1 run `fn`; a worker asks for the next item when it returns a result,
so fast ranks take more items (dynamic scheduling, not a static split). With one rank `fn` runs inline.

Transport: mpi4py over a private duplicate of COMM_WORLD, not torch.distributed. It is there under any
MPI launch, needs no `init_process_group` (tasks need not touch torch), pickles any object, matches
messages from ANY_SOURCE in one step (`improbe`), and lets every wait poll against its own deadline,
so a timeout can say which rank waited for what. Its messages never mix with the training traffic of
the torch process group, because map uses its own duplicate of COMM_WORLD (made once, by the first
call), nor with those of an earlier call, because each call has its own tag.
"""

from __future__ import annotations

import functools
import os
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..errors import MapTimeout, check_same_world
from ..records import record
from ..runtime.bootstrap import Session
from ..runtime.prepare import job_timeout
from ..settingtable import TIMEOUT
from ..waits import Backoff, poll_until

__all__ = ["TaskError", "compute", "map", "run"]

T = TypeVar("T")
R = TypeVar("R")

_TAG_SPAN = 2**15 - 2  # MPI guarantees tags up to 32767
_REPR_LIMIT = 120


@record
class _Maps:
    """This process's private communicator for map's messages, once made, and how many distributed maps it has run
    (the same count on every rank).

    One per process (`_MAPS`): `hpcdist.map` is called anywhere in a program, with nothing to hand it.
    """

    comm: Any = None
    calls: int = 0


_MAPS = _Maps()


class TaskError(RuntimeError):
    """`fn` raised for an item: which item, on which rank, and the original traceback text."""

    def __init__(self, index: int, item: str, rank: int, error: str, remote_traceback: str) -> None:
        self.index, self.item, self.rank, self.error, self.remote_traceback = index, item, rank, error, remote_traceback
        super().__init__(
            f"hpcdist.map: fn failed for item {index} ({item}) on rank {rank}: {error}\n"
            f"--- traceback on rank {rank} ---\n{remote_traceback.rstrip()}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.index, self.item, self.rank, self.error, self.remote_traceback))


def map(fn: Callable[[T], R], items: Iterable[T], *, timeout: float | None = None) -> list[R] | None:  # noqa: A001
    """Apply `fn` to every item across the ranks; rank 0 gets the results in item order, other ranks None.

    Every rank must call it (it is collective) with the same `fn`; `items` is read on rank 0 only and
    each item is sent (pickled) to the worker that runs it, so other ranks may pass anything iterable.
    Results are pickled back to rank 0. If `fn` raises, no further items are handed out, and every
    rank raises TaskError naming the item, the rank and the original traceback. Each wait for a message
    (including a wait for one task to finish) ends after `timeout` seconds (default: the TIMEOUT setting, or
    300) with MapTimeout.

    Raises:
        TaskError: `fn` raised for an item on some rank (every rank raises it).
        MapTimeout: a wait for a message outlived the timeout; the message says who waited for what.
        UsageError: the ranks are not one MPI job (e.g. under torchrun), or the timeout is not positive.
    """
    seconds = job_timeout(os.environ, timeout)
    world = _world()
    if world is None or world.Get_size() == 1:
        return _inline(fn, items)
    comm = _private_comm(world, seconds)
    _MAPS.calls += 1
    tag = 1 + _MAPS.calls % _TAG_SPAN  # every call its own tag: a late message of an earlier call never matches
    if comm.Get_rank() == 0:
        failure, results = _coordinate(comm, tag, items, seconds)
    else:
        failure, results = _work(comm, tag, fn, seconds), None
    if failure is not None:
        raise TaskError(*failure)
    return results


def _world() -> Any:
    """COMM_WORLD when this process is one rank of an MPI job; None in a lone process."""
    from ..runtime.env import LaunchEnv

    env = LaunchEnv.from_environ(os.environ)
    if not env.is_mpi and env.world_size == 1:
        return None  # a plain `python x.py`: do not pay for starting MPI
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    check_same_world(f"the {env.launcher} launch", (env.rank, env.world_size), (world.Get_rank(), world.Get_size()))
    return world


def _private_comm(world: Any, seconds: float) -> Any:
    """This process's duplicate of COMM_WORLD for map's messages, made once (Idup, so its wait can time out)."""
    if _MAPS.comm is not None:
        return _MAPS.comm
    comm, request = world.Idup()
    _wait_for(
        request.Test,
        seconds,
        lambda: (
            f"rank {world.Get_rank()} waited {seconds:g} s for every rank to enter its first hpcdist.map "
            "(every rank must call it)"
        ),
    )
    _MAPS.comm = comm
    return comm


def _inline(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """One rank: run every item here, with the same TaskError as a distributed run."""
    results = []
    for index, item in enumerate(items):
        try:
            results.append(fn(item))
        except Exception as exc:
            raise TaskError(index, _short_repr(item), 0, _one_line(exc), traceback.format_exc()) from exc
    return results


def _coordinate(comm: Any, tag: int, items: Iterable[Any], seconds: float) -> tuple[tuple[Any, ...] | None, list[Any]]:
    """Rank 0: answer each worker with the next item; once none is left and none is running, end the map.

    A worker with nothing left to do waits for the verdict, so that a failure of a task still running
    elsewhere reaches every rank. Returns (failure or None, results in item order).
    """
    workers = set(range(1, comm.Get_size()))
    running: dict[int, tuple[int, str]] = {}  # worker -> (index, item repr) it is computing
    asked: set[int] = set()  # workers that have called map (sent at least one message)
    finished: set[int] = set()  # workers waiting for the end of the map
    results: dict[int, Any] = {}
    failure: tuple[Any, ...] | None = None
    pending = enumerate(items)
    handed = 0
    while finished != workers:
        source, message = _receive(
            comm, None, tag, seconds, lambda: _coordinator_wait(workers - finished, running, asked, seconds)
        )
        asked.add(source)
        running.pop(source, None)
        if message[0] == "done":
            results[message[1]] = message[2]
        elif message[0] == "failed" and failure is None:
            failure = (message[1], message[2], source, message[3], message[4])
        if failure is None:
            try:
                nxt = next(pending, None)
            except Exception as exc:  # noqa: BLE001 - any failure of the user's iterable is reported, not raised mid-protocol
                nxt, failure = (
                    None,
                    (handed, "<items>", 0, f"iterating the items raised {_one_line(exc)}", traceback.format_exc()),
                )
            if nxt is not None:
                index, item = nxt
                try:
                    comm.send(("item", index, item), dest=source, tag=tag)
                    running[source], handed = (index, _short_repr(item)), handed + 1
                    continue
                except Exception as exc:  # noqa: BLE001 - any failure to send is reported to every rank
                    failure = (
                        index,
                        _short_repr(item),
                        0,
                        f"could not send it to rank {source}: {_one_line(exc)}",
                        traceback.format_exc(),
                    )
        finished.add(source)
    for worker in sorted(workers):
        comm.send(("stop", failure), dest=worker, tag=tag)
    return failure, [results[i] for i in range(len(results))] if failure is None else []


def _work(comm: Any, tag: int, fn: Callable[[Any], Any], seconds: float) -> tuple[Any, ...] | None:
    """A worker: ask, compute, return the result (which asks for the next item); return rank 0's verdict."""
    rank = comm.Get_rank()
    comm.send(("ready",), dest=0, tag=tag)
    last = "its first item"
    while True:
        _, message = _receive(
            comm,
            0,
            tag,
            seconds,
            functools.partial(_worker_wait, rank, seconds, last),
        )
        if message[0] == "stop":
            return message[1]
        _, index, item = message
        try:
            reply: tuple[Any, ...] = ("done", index, fn(item))
        except Exception as exc:  # noqa: BLE001 - the user's fn may raise anything; it travels to rank 0
            reply = ("failed", index, _short_repr(item), _one_line(exc), traceback.format_exc())
        try:
            comm.send(reply, dest=0, tag=tag)
        except Exception as exc:  # noqa: BLE001 - e.g. a result that cannot be pickled
            comm.send(
                (
                    "failed",
                    index,
                    _short_repr(item),
                    f"its result could not be sent to rank 0: {_one_line(exc)}",
                    traceback.format_exc(),
                ),
                dest=0,
                tag=tag,
            )
        last = f"the item after item {index}"


def _receive(comm: Any, source: int | None, tag: int, seconds: float, explain: Callable[[], str]) -> tuple[int, Any]:
    """The next message from `source` (None: any rank), polling until `seconds` pass; then MapTimeout."""
    from mpi4py import MPI

    status = MPI.Status()
    found: list[Any] = []

    def arrived() -> bool:
        message = comm.improbe(source=MPI.ANY_SOURCE if source is None else source, tag=tag, status=status)
        if message is not None:
            found.append(message)
        return message is not None

    _wait_for(arrived, seconds, explain)
    return status.Get_source(), found[0].recv()


def _wait_for(done: Callable[[], bool], seconds: float, explain: Callable[[], str]) -> None:
    """Poll `done` with a growing pause (0.1 ms to 10 ms) until it is true; MapTimeout after `seconds`."""
    poll_until(done, time.monotonic() + seconds, explain, backoff=Backoff(1e-4, 0.01), error=MapTimeout)


def _worker_wait(rank: int, seconds: float, last: str) -> str:
    """What a worker was waiting for, for its timeout message."""
    return (
        f"rank {rank} waited {seconds:g} s for rank 0 to send {last} (or the end) in hpcdist.map; "
        "is rank 0 inside hpcdist.map (every rank must call it)?"
    )


def _coordinator_wait(active: set[int], running: dict[int, tuple[int, str]], asked: set[int], seconds: float) -> str:
    """What rank 0 was waiting for, worker by worker, for its timeout message."""
    states = []
    for rank in sorted(active):
        if rank in running:
            index, item = running[rank]
            states.append(f"rank {rank} is computing item {index} ({item})")
        elif rank not in asked:
            states.append(f"rank {rank} has not called hpcdist.map")
        else:
            states.append(f"rank {rank} is done")
    return (
        f"rank 0 waited {seconds:g} s for a message from any of ranks {sorted(active)} in hpcdist.map: "
        f"{'; '.join(states)} (a single task may take at most the timeout; raise "
        f"{TIMEOUT.name} or pass timeout=)"
    )


def _short_repr(item: Any) -> str:
    """repr(item), cut to a readable length."""
    try:
        text = repr(item)
    except Exception:  # noqa: BLE001 - repr() of a user's object may raise anything
        text = f"<{type(item).__name__}>"
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _one_line(exc: BaseException) -> str:
    """`Type: message`, like the last line of a traceback."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def compute(x: int) -> int:
    """The seeds' remote function."""
    return x**2


def run(session: Session) -> str | None:
    """The `taskmap` workload: square range(10) across the ranks; rank 0 checks the results."""
    mine: list[int] = []

    def tracked(x: int) -> int:
        mine.append(x)
        return compute(x)

    results = map(tracked, range(10), timeout=session.timeout)
    print(f"rank {session.rank}: computed items {mine}")
    if session.rank != 0:
        return None
    want = [compute(x) for x in range(10)]
    print(f"rank 0: map(x**2, range(10)) -> {results}")
    return None if results == want else f"rank 0: map(x**2, range(10)) gave {results}, expected {want}"
