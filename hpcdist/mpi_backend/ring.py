"""Ring all-reduce for large tensors, on non-blocking point-to-point messages.

Open MPI's non-blocking Iallreduce (libnbc) picks a slow algorithm for large messages on few ranks:
measured at 2 ranks, 1 MiB float32, it reaches 2.4 GB/s where blocking Allreduce reaches 5.1 GB/s.
A ring (reduce-scatter, then all-gather, 2(p-1) steps of n/p bytes) moves the minimum data and
matches blocking Allreduce, while staying non-blocking so the group timeout still applies. The
reduction of each received chunk runs in torch. Traffic goes over a duplicate of the group's
communicator, so it never matches a user's send/recv.

Set HPCDIST_MPI_RING_BYTES to change the size from which the ring is used (0 disables it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from mpi4py import MPI

__all__ = ["RING_DTYPES", "RING_MIN_BYTES", "ring_allreduce"]

_env = int(os.environ.get("HPCDIST_MPI_RING_BYTES", str(256 * 1024)))
RING_MIN_BYTES = _env if _env > 0 else 1 << 62
_TAG_BASE, _TAG_SPAN = 7001, 4096  # one tag per ring op: DDP keeps several bucket all-reduces in flight
#: dtypes whose in-place torch arithmetic is complete (uint16/32/64 are not)
RING_DTYPES = frozenset({torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128})
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


def _spec(t: torch.Tensor) -> list:
    return [_fromaddress(t.data_ptr(), t.nbytes), _BYTE]


def ring_allreduce(group: Any, t: torch.Tensor, op: str) -> Iterator[list]:
    """The ring's steps, each a list of requests; its tag is taken now, in the order the ops are issued."""
    group._ring_seq += 1  # the same on every rank: collectives are issued in the same order everywhere
    return _ring_steps(group, t, op, _TAG_BASE + group._ring_seq % _TAG_SPAN)


def _ring_steps(group: Any, t: torch.Tensor, op: str, tag: int) -> Iterator[list]:
    """Yield the request lists of each ring step; `t` (contiguous, host) holds the result at the end."""
    comm, size, rank = group._ring_comm, group._size, group._rank
    if t.dtype == torch.bool:
        op = _BOOL_COMBINE.get(op, op)
    combine = _COMBINE[op]
    flat = t.view(-1)
    n = flat.numel()
    bounds = [n * i // size for i in range(size + 1)]
    chunks = [flat[bounds[i] : bounds[i + 1]] for i in range(size)]
    scratch = torch.empty(bounds[1] - bounds[0] + 1, dtype=t.dtype)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):  # reduce-scatter: afterwards chunk (rank+1) % size is complete here
        send, mine = chunks[(rank - step) % size], chunks[(rank - step - 1) % size]
        incoming = scratch[: mine.numel()]
        yield [comm.Irecv(_spec(incoming), left, tag), comm.Isend(_spec(send), right, tag)]
        combine(mine, incoming)
    for step in range(size - 1):  # all-gather the completed chunks around the ring
        send, into = chunks[(rank + 1 - step) % size], chunks[(rank - step) % size]
        yield [comm.Irecv(_spec(into), left, tag), comm.Isend(_spec(send), right, tag)]
