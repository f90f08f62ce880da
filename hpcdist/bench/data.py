"""Deterministic per-rank inputs for `hpcdist bench` and the outputs they must give (numpy, no torch).

Reductions use a(r, k) = 1 + (k + r) % 3 (prod: 2 where k % n == r, else 1, so the product is 2 and never
overflows); data movement uses g(r, k) = 1 + (31 r + k) % 101. Both are small integers, exact in every
dtype, and their reductions over any number of ranks have a closed form, so checking costs O(count).
"""

from __future__ import annotations

from functools import reduce as _fold

import numpy as np

from .plan import Counts

__all__ = ["count_wrong", "expected_values", "send_values"]

_RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-6, "float64": 1e-12}
_INT_BITS = {"int8": (8, True), "uint8": (8, False), "int32": (32, True), "int64": (64, True)}


def _index(start: int, length: int) -> np.ndarray:
    """Global element indices start … start+length-1."""
    return np.arange(start, start + length, dtype=np.int64)


def _reduce_input(op: str, rank: int, nranks: int, start: int, length: int) -> np.ndarray:
    """a(rank, k) for k in [start, start+length)."""
    k = _index(start, length)
    if op == "prod":
        return np.where(k % nranks == rank, 2.0, 1.0)
    return (1 + (k + rank) % 3).astype(np.float64)


def _reduced(op: str, nranks: int, start: int, length: int) -> np.ndarray:
    """The reduction of a(r, k) over all ranks r, in closed form (a cycles with period 3 in r)."""
    k = _index(start, length)
    if op == "prod":
        return np.full(length, 2.0)
    parts = [(k + r) % 3 for r in range(min(nranks, 3))]
    if op == "min":
        return 1.0 + _fold(np.minimum, parts)
    if op == "max":
        return 1.0 + _fold(np.maximum, parts)
    total = nranks + 3 * (nranks // 3) + sum(parts[: nranks % 3], np.zeros(length, np.int64))
    return total / nranks if op == "avg" else total.astype(np.float64)


def _moved(rank: int, start: int, length: int) -> np.ndarray:
    """g(rank, k) for k in [start, start+length)."""
    return (1 + (31 * rank + _index(start, length)) % 101).astype(np.float64)


def send_values(collective: str, op: str, rank: int, nranks: int, counts: Counts) -> np.ndarray:
    """What this rank puts in its send buffer (counts.send elements), as float64."""
    if collective in ("all_reduce", "reduce", "reduce_scatter"):
        return _reduce_input(op, rank, nranks, 0, counts.send)
    return _moved(rank, 0, counts.send)


def expected_values(collective: str, op: str, rank: int, nranks: int, counts: Counts, root: int) -> np.ndarray | None:
    """What this rank's receive buffer (counts.recv elements) must hold, or None if it is not checked."""
    c = counts.param
    if collective == "all_reduce" or (collective == "reduce" and rank == root):
        return _reduced(op, nranks, 0, counts.recv)
    if collective == "reduce":
        return None  # only the root receives a result
    if collective == "reduce_scatter":
        return _reduced(op, nranks, rank * c, c)
    if collective == "all_gather":
        return np.concatenate([_moved(j, 0, c) for j in range(nranks)])
    if collective == "broadcast":
        return _moved(root, 0, counts.recv)
    if collective == "alltoall":
        return np.concatenate([_moved(j, rank * c, c) for j in range(nranks)])
    if collective == "sendrecv":
        return _moved((rank - 1) % nranks, 0, counts.recv)
    raise ValueError(f"unknown collective {collective!r}")


def count_wrong(got: np.ndarray, want: np.ndarray | None, dtype: str, op: str) -> int:
    """Elements of `got` that differ from `want`: exact for integers (wrapping like the dtype), else within a
    tolerance for the dtype."""
    if want is None:
        return 0
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        return max(got.size, want.size)
    if dtype in _INT_BITS:
        bits, signed = _INT_BITS[dtype]
        if op != "avg" and bits < 64:
            want = np.mod(want + (2 ** (bits - 1) if signed else 0), 2**bits) - (2 ** (bits - 1) if signed else 0)
        return int(np.count_nonzero(np.abs(got - want) > (1.0 if op == "avg" else 0.0)))
    rtol = _RTOL[dtype]
    return int(np.count_nonzero(~np.isclose(got, want, rtol=rtol, atol=rtol)))
