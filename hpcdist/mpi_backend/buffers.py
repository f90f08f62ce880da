"""Tensors as MPI buffers: zero-copy for contiguous host tensors, staged copies otherwise.

`MPI.buffer.fromaddress` wraps a tensor's memory without copying (about 0.2 µs, five times faster than
`tensor.numpy()`). It does not keep the tensor alive: the caller (a Work) must hold a reference
until MPI is done. CUDA tensors are staged through host memory, unless the MPI_CUDA_AWARE setting says
the MPI library reads device memory itself (then the current stream is synchronised first and the
device pointer goes to MPI; untested here, as this machine has no GPU).
"""

from __future__ import annotations

import functools
import os

import torch
from mpi4py import MPI

from .. import settings

__all__ = ["byte_spec", "cuda_aware", "raw", "readable", "typed_spec", "writable"]

_fromaddress = MPI.buffer.fromaddress
_BYTE = MPI.BYTE


@functools.cache
def cuda_aware() -> bool:
    """Whether the MPI_CUDA_AWARE setting says the MPI library reads device memory (read at first use)."""
    return settings.mpi_cuda_aware(os.environ)


def raw(t: torch.Tensor) -> MPI.buffer:
    """The memory of a contiguous, MPI-reachable tensor, without a copy."""
    return _fromaddress(t.data_ptr(), t.nbytes)


def byte_spec(t: torch.Tensor) -> list:
    """[buffer, MPI.BYTE]: the tensor as raw bytes, for operations that only move data."""
    return [_fromaddress(t.data_ptr(), t.nbytes), _BYTE]


def typed_spec(t: torch.Tensor, mpi_type: MPI.Datatype) -> list:
    """[buffer, count, datatype]: the tensor as `numel` elements of an MPI type, for reductions."""
    return [_fromaddress(t.data_ptr(), t.nbytes), t.numel(), mpi_type]


def _reachable(t: torch.Tensor) -> bool:
    if t.is_cpu:
        return True
    if cuda_aware() and t.is_cuda:
        torch.cuda.current_stream(t.device).synchronize()
        return True
    return False


def readable(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor MPI can read with t's values: t itself whenever possible."""
    if t.is_contiguous() and _reachable(t) and not (t.is_conj() or t.is_neg()):
        return t
    if t.is_cpu or cuda_aware():
        return t.resolve_conj().resolve_neg().contiguous()
    return t.resolve_conj().resolve_neg().to("cpu").contiguous()


def writable(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor MPI can write t's new values into: t itself, or a host staging copy."""
    if t.is_contiguous() and _reachable(t) and not (t.is_conj() or t.is_neg()):
        return t
    return torch.empty(t.shape, dtype=t.dtype, device="cpu" if not cuda_aware() else t.device)
