"""Ring all-reduce for large tensors, on non-blocking point-to-point messages.

Open MPI's non-blocking Iallreduce (libnbc) picks a slow algorithm for in-place reductions on few ranks:
measured at 2 ranks, 1 MiB float32, it takes twice as long as blocking Allreduce. A ring (reduce-scatter,
then all-gather, 2(p-1) steps of n/p bytes) moves the minimum data and matches blocking Allreduce, while
staying non-blocking so the group timeout still applies. Reduce-scatter messages are cut into segments of
at most 1 MiB, double-buffered: the next one is in flight while the last one is added (in torch), still in
cache. Traffic goes over a duplicate of the group's communicator, so it never matches a user's send/recv.

The compiled backend runs the same ring in C++ (native.cpp), for all_reduce from `ring_min_bytes(compiled=True)`
and for every reduce_scatter. The MPI_RING_BYTES setting changes the size from which all_reduce takes the ring
(0 disables it).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from mpi4py import MPI

from .. import settings

__all__ = ["COMPILED_TAG", "RING_DTYPES", "SEGMENT", "ring_allreduce", "ring_min_bytes"]

_DEFAULT_MIN_BYTES = 256 * 1024
_COMPILED_MIN_BYTES = 8 << 20
COMPILED_TAG = 7000  # the compiled backend's rings' tag on the ring communicator (one: its rings run in order)
_TAG_BASE, _TAG_SPAN = COMPILED_TAG + 1, 4096  # one tag per ring op: DDP keeps several bucket all-reduces in flight
SEGMENT = 1 << 20  # bytes per message, both rings: at 2 ranks 10-20% faster than whole chunks from 8 MiB, equal below
_ABANDONED: list = []  # buffers of failed rings, which MPI may still read or write
_POOL = 4  # free scratch pairs (2 MiB) a group keeps per dtype; DDP has a few bucket all-reduces in flight
#: dtypes whose in-place torch arithmetic is complete (uint16/32/64 are not)
RING_DTYPES = frozenset(
    {
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    }
)
_fromaddress = MPI.buffer.fromaddress
_BYTE = MPI.BYTE

_COMBINE = {
    "SUM": lambda acc, x: acc.add_(x),
    "PRODUCT": lambda acc, x: acc.mul_(x),
    "MIN": lambda acc, x: torch.minimum(acc, x, out=acc),
    "MAX": lambda acc, x: torch.maximum(acc, x, out=acc),
    "BAND": lambda acc, x: acc.bitwise_and_(x),
    "BOR": lambda acc, x: acc.bitwise_or_(x),
    "BXOR": lambda acc, x: acc.bitwise_xor_(x),
}
_BOOL_COMBINE = {"SUM": "BOR", "MAX": "BOR", "PRODUCT": "BAND", "MIN": "BAND"}


def ring_min_bytes(compiled: bool = False) -> int:
    """The size from which all_reduce takes the ring: the MPI_RING_BYTES setting (0: never), read by each new group.

    By default 256 KiB on the Python backend (its non-blocking MPI calls are slower than the ring from there) and
    8 MiB on the compiled one (MPI's blocking all-reduce is as fast as the ring below that, measured at 2 ranks).

    Raises:
        UsageError: the setting is no whole number.
    """
    value = settings.mpi_ring_bytes(os.environ)
    if value is None:
        return _COMPILED_MIN_BYTES if compiled else _DEFAULT_MIN_BYTES
    return value if value > 0 else 1 << 62


def _bytes(address: int, nbytes: int) -> list:
    return [_fromaddress(address, nbytes), _BYTE]


def ring_allreduce(group: Any, t: torch.Tensor, op: str) -> Iterator[list]:
    """The ring's steps, each a list of requests; its tag is taken now, in the order the ops are issued."""
    group._ring_seq += 1  # the same on every rank: collectives are issued in the same order everywhere
    return _ring_steps(group, t, op, _TAG_BASE + group._ring_seq % _TAG_SPAN)


class _Segment(NamedTuple):
    """One reduce-scatter message pair, in bytes from the tensor's start, and where its sum lands (elements)."""

    step: int  # a step's first segment is sent only once the previous step's sums are all done
    recv_len: int  # into the scratch half `index % 2`; 0 when this rank's chunk has no such segment
    send_at: int
    send_len: int
    into: int
    elements: int  # how many elements that sum has


@functools.lru_cache(maxsize=256)
def _schedule(
    n: int, item: int, size: int, rank: int
) -> tuple[tuple[_Segment, ...], tuple[tuple[int, int, int, int], ...]]:
    """(reduce-scatter segments in order, all-gather steps as (recv_at, recv_len, send_at, send_len) in bytes)
    for `n` elements of `item` bytes on group rank `rank` of `size`; the same on every rank for a chunk."""
    bounds = [n * i // size * item for i in range(size + 1)]
    segments = []
    for step in range(size - 1):  # afterwards chunk (rank+1) % size is complete here
        s, m = (rank - step) % size, (rank - step - 1) % size
        send_len, recv_len = bounds[s + 1] - bounds[s], bounds[m + 1] - bounds[m]
        for at in range(0, max(send_len, recv_len), SEGMENT):
            got = max(0, min(SEGMENT, recv_len - at))
            segments.append(
                _Segment(
                    step,
                    got,
                    bounds[s] + at,
                    max(0, min(SEGMENT, send_len - at)),
                    (bounds[m] + at) // item,
                    got // item,
                )
            )
    gather = tuple(
        (bounds[i], bounds[i + 1] - bounds[i], bounds[j], bounds[j + 1] - bounds[j])
        for i, j in (((rank - step) % size, (rank + 1 - step) % size) for step in range(size - 1))
    )
    return tuple(segments), gather


def _ring_steps(group: Any, t: torch.Tensor, op: str, tag: int) -> Iterator[list]:
    """Yield the request lists of each ring step; `t` (contiguous, host) holds the result at the end.

    Messages are built from addresses, not tensor slices: each torch view costs about a microsecond.
    """
    comm, size, rank = group._ring_comm, group._size, group._rank
    combine = _COMBINE[_BOOL_COMBINE.get(op, op) if t.dtype == torch.bool else op]
    flat, base = (t if t.dim() == 1 else t.view(-1)), t.data_ptr()
    segments, gather = _schedule(flat.numel(), t.element_size(), size, rank)
    pool = group._ring_scratch.setdefault(t.dtype, [])  # typed, so no per-op views (about 1 µs each)
    halves = pool.pop() if pool else _new_halves(t.dtype, t.element_size())  # list ops are atomic: no lock
    scratch = (halves[0].data_ptr(), halves[1].data_ptr())
    right, left = (rank + 1) % size, (rank - 1) % size

    def post(k: int) -> list:
        seg = segments[k]
        reqs = [comm.Irecv(_bytes(scratch[k % 2], seg.recv_len), left, tag)] if seg.recv_len else []
        if seg.send_len:
            reqs.append(comm.Isend(_bytes(base + seg.send_at, seg.send_len), right, tag))
        return reqs

    following: list = []
    try:
        pending, last = (post(0) if segments else []), len(segments) - 1
        for k, seg in enumerate(segments):
            overlap = k < last and segments[k + 1].step == seg.step
            following = post(k + 1) if overlap else []
            yield pending
            if seg.elements:
                half = halves[k % 2]
                combine(
                    flat[seg.into : seg.into + seg.elements],
                    half if seg.elements == len(half) else half[: seg.elements],
                )
            pending = following if overlap or k == last else post(k + 1)
        for recv_at, recv_len, send_at, send_len in gather:
            yield [
                comm.Irecv(_bytes(base + recv_at, recv_len), left, tag),
                comm.Isend(_bytes(base + send_at, send_len), right, tag),
            ]
    except GeneratorExit:  # abandoned after a failure: MPI may still use these buffers, so never free them
        _ABANDONED.append((halves, t, following))
        raise
    if len(pool) < _POOL:  # only once every request is done: a failed ring keeps its buffers
        pool.append(halves)


def _new_halves(dtype: torch.dtype, item: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two receive buffers of SEGMENT bytes: one being added while the other fills."""
    count = SEGMENT // item
    return torch.empty(count, dtype=dtype), torch.empty(count, dtype=dtype)
