"""The compiled ring, below Python: every dtype and op MPI reduces, sizes not divisible by the ranks, messages cut at
every segment boundary, and a failure with segments in flight (their requests completed before the error leaves)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch
from mpi4py import MPI

pytestmark = pytest.mark.mpi

DTYPES = [torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
Reduce = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
OPS: dict[str, Reduce] = {"sum": torch.add, "product": torch.mul, "min": torch.minimum, "max": torch.maximum}
BITWISE: dict[str, Reduce] = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}


def inputs(rank: int, n: int, dtype: torch.dtype, op: str) -> torch.Tensor:
    """Rank `rank`'s input, the same on every rank that makes it: small integers, so every sum is exact."""
    gen = torch.Generator().manual_seed(1000 * rank + n)
    low, high = (1, 3) if op == "product" else (0, 6 if dtype in (torch.int8, torch.uint8) else 100)
    return torch.randint(low, high, (n,), generator=gen).to(dtype)


def expected(size: int, n: int, dtype: torch.dtype, op: str) -> torch.Tensor:
    """Every rank's input reduced by `op`, one rank after another, in the dtype (integers wrap as MPI's do)."""
    out = inputs(0, n, dtype, op)
    for rank in range(1, size):
        out = {**OPS, **BITWISE}[op](out, inputs(rank, n, dtype, op)).to(dtype)
    return out


def sizes(size: int, item: int, segment: int) -> list[int]:
    """Element counts around the ranks (not divisible by them) and around one and two segments per block."""
    per = max(1, segment // item)
    around = [size - 1, size, size + 1, per * size - 1, per * size + 1, 2 * per * size + size - 1]
    return sorted({n for n in [1, *around] if n > 0})


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_reduce_is_exact_for_every_op_size_and_segment_boundary(native_testing, dtype) -> None:
    comm = MPI.COMM_WORLD.Dup()
    item = torch.empty(0, dtype=dtype).element_size()
    ops = [*OPS, *(BITWISE if not dtype.is_floating_point else [])]
    for op, segment in itertools.product(ops, (16, 64)):
        for n in sizes(comm.size, item, segment):
            t = inputs(comm.rank, n, dtype, op)
            native_testing.all_reduce(comm.handle, t, op, segment)
            assert torch.equal(t, expected(comm.size, n, dtype, op)), (op, segment, n)
    comm.Free()


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8], ids=str)
def test_reduce_scatter_gives_each_rank_its_block_for_every_op(native_testing, dtype) -> None:
    comm = MPI.COMM_WORLD.Dup()
    item = torch.empty(0, dtype=dtype).element_size()
    ops = [*OPS, *(BITWISE if not dtype.is_floating_point else [])]
    for op in ops:
        for block in (1, 5, 64 // item + 3):
            whole = inputs(comm.rank, block * comm.size, dtype, op)
            out = torch.zeros(block, dtype=dtype)
            native_testing.reduce_scatter(comm.handle, list(whole.chunk(comm.size)), out, op, 64)
            want = expected(comm.size, block * comm.size, dtype, op).chunk(comm.size)[comm.rank]
            assert torch.equal(out, want), (op, block)
    comm.Free()


def test_a_ring_that_fails_with_segments_in_flight_completes_their_requests_and_the_rank_goes_on(
    native_testing,
) -> None:
    comm = MPI.COMM_WORLD.Dup()
    assert comm.size >= 2, "a ring needs two ranks: run this tier at 2 ranks or more"
    completed, abandoned = native_testing.leftovers()
    t = torch.ones(1000)  # 250+ elements a block: 16 segments of 64 bytes at 4 ranks
    with pytest.raises(RuntimeError, match="failed on purpose"):
        native_testing.all_reduce(comm.handle, t, "sum", 64, fail_at=2)  # segments 0 and 1 posted, none waited for
    now_completed, now_abandoned = native_testing.leftovers()
    assert (now_completed - completed, now_abandoned - abandoned) == (4, 0)  # a receive and a send each
    MPI.COMM_WORLD.Barrier()
    fresh = MPI.COMM_WORLD.Dup()  # the failed ring's communicator is left alone, as a recovery leaves it
    t = torch.ones(1000)
    native_testing.all_reduce(fresh.handle, t, "sum", 64)
    assert torch.equal(t, torch.full((1000,), float(comm.size)))
    fresh.Free()
