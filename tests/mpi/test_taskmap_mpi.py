"""hpcdist.map under a real `mpiexec -n N` (any N): dynamic hand-out, ordered results, failures named."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from hpcdist.errors import MapTimeout
from hpcdist.workloads.taskmap import TaskError
from hpcdist.workloads.taskmap import map as task_map

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture
def shared(comm) -> Iterator[Path]:
    """A directory every rank of this host sees, made by rank 0 (the tier runs on one host)."""
    path = Path(comm.bcast(tempfile.mkdtemp(prefix="taskmap-") if comm.rank == 0 else None))
    yield path
    comm.Barrier()
    if comm.rank == 0:
        for entry in path.iterdir():
            entry.unlink()
        path.rmdir()


def _ran_where(comm, mine: list[int]) -> dict[int, list[int]]:
    """Rank -> items it computed, known on every rank."""
    return dict(enumerate(comm.allgather(mine)))


def test_the_seeds_squares_come_back_in_order_on_rank_0_only(comm) -> None:
    mine: list[int] = []

    def square(x: int) -> int:
        mine.append(x)
        return x**2

    results = task_map(square, range(10))
    if comm.rank == 0:
        assert results == [x**2 for x in range(10)]
    else:
        assert results is None
    where = _ran_where(comm, mine)
    assert sorted(x for items in where.values() for x in items) == list(range(10))  # each item exactly once
    assert where[0] == ([] if comm.size > 1 else list(range(10)))  # rank 0 only coordinates; alone, it computes


@pytest.mark.world_size(min=3)  # two workers at least: one held, the others take the rest
def test_items_are_handed_out_dynamically_not_split_statically(comm, shared: Path) -> None:
    mine: list[int] = []

    def work(x: int) -> int:
        mine.append(x)
        if x == 0:  # held until the other workers did the 11 others: under a static split it would wait in vain
            deadline = time.monotonic() + 120
            while len(os.listdir(shared)) < 11:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"item 0 waited 120 s for the 11 others: done {sorted(os.listdir(shared))}")
                time.sleep(0.01)  # between two looks
        else:
            (shared / str(x)).touch()
        return -x

    results = task_map(work, range(12))
    assert results == ([-x for x in range(12)] if comm.rank == 0 else None)
    where = _ran_where(comm, mine)
    slow = next(rank for rank, items in where.items() if 0 in items)
    assert where[slow] == [0]  # while it was held, the other workers took all 11 remaining items
    assert sum(len(items) for rank, items in where.items() if rank not in (0, slow)) == 11


def test_items_are_read_on_rank_0_only_and_may_be_any_picklable_object(comm) -> None:
    # None (not even iterable) off rank 0: map must never read it there
    items: Any = [{"name": "a", "n": 1}, ("b", 2), None, 3.5] if comm.rank == 0 else None
    results = task_map(repr, items)
    if comm.rank == 0:
        assert results == [repr(item) for item in items]


def test_an_empty_list_gives_an_empty_result(comm) -> None:
    assert task_map(abs, []) == ([] if comm.rank == 0 else None)


def test_a_failing_item_is_raised_on_every_rank_with_its_item_rank_and_traceback(comm) -> None:
    mine: list[int] = []

    def fragile(x: int) -> int:
        mine.append(x)
        if x == 3:
            raise ValueError(f"no good: {x}")
        return x

    with pytest.raises(TaskError) as caught:
        task_map(fragile, range(6))
    error = caught.value
    failed_on = next(rank for rank, items in _ran_where(comm, mine).items() if 3 in items)
    assert (error.index, error.item, error.rank, error.error) == (3, "3", failed_on, "ValueError: no good: 3")
    assert 'raise ValueError(f"no good: {x}")' in error.remote_traceback
    assert f"for item 3 (3) on rank {failed_on}: ValueError: no good: 3" in str(error)
    # the job goes on: a later map works
    assert task_map(str, range(3)) == (["0", "1", "2"] if comm.rank == 0 else None)


@pytest.mark.world_size(min=2)
def test_a_result_that_cannot_be_pickled_is_a_named_failure(comm) -> None:
    with pytest.raises(TaskError, match=r"item 0 \(7\) on rank [1-9]\d*: its result could not be sent to rank 0"):
        task_map(lambda x: lambda: x, [7])


@pytest.mark.world_size(max=1)
def test_alone_a_result_that_cannot_be_pickled_comes_back_as_it_is(comm) -> None:
    inline = task_map(lambda x: lambda: x, [7])  # inline: nothing is pickled
    assert inline is not None and inline[0]() == 7


@pytest.mark.world_size(min=2)
def test_a_rank_that_waits_too_long_says_who_waited_for_what(comm) -> None:
    if comm.rank == 0:
        comm.Barrier()  # a coordinator busy elsewhere until the workers gave up
        with pytest.raises(MapTimeout, match=r"rank 0 waited 1 s for a message from any of ranks"):
            task_map(abs, range(3), timeout=1)
    else:
        with pytest.raises(MapTimeout, match=rf"rank {comm.rank} waited 1 s for rank 0 to send its first item"):
            task_map(abs, range(3), timeout=1)
        comm.Barrier()
    comm.Barrier()
    assert task_map(abs, [-1, -2]) == ([1, 2] if comm.rank == 0 else None)  # stale messages of that call are ignored


@pytest.mark.world_size(max=1)
def test_alone_there_is_nothing_to_wait_for(comm) -> None:
    assert task_map(abs, [-1, -2], timeout=1) == [1, 2]  # inline


def test_the_taskmap_workload_squares_range_10_and_verifies_it(comm, capsys) -> None:
    from types import SimpleNamespace

    from hpcdist.runtime.bootstrap import Session
    from hpcdist.workloads.taskmap import run

    assert run(cast(Session, SimpleNamespace(rank=comm.rank, timeout=60))) is None  # what run reads of a Session
    out = capsys.readouterr().out.splitlines()
    computed = comm.allgather(next(line for line in out if line.startswith(f"rank {comm.rank}: computed items")))
    items = sorted(int(x) for line in computed for x in line.split("[")[1].rstrip("]").split(",") if x.strip())
    assert items == list(range(10))
    if comm.rank == 0:
        assert "rank 0: map(x**2, range(10)) -> [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]" in out
