"""Reading torch's call forms: options objects, or the (tensor, root, op, timeout) overloads."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..waits import as_seconds
from .dtypes import op_name

__all__ = ["as_list", "check_root", "op_of", "overlaps", "timeout_of"]

_SUM = dist.ReduceOp.SUM
_Tensor = torch.Tensor


def op_of(op: Any) -> str:
    """The reduce op's name; SUM (the common case) is recognised without enum hashing."""
    if op is None or op == _SUM:
        return "SUM"
    return op_name(op)


def timeout_of(source: Any) -> float | None:
    """Seconds from an options object or a timedelta; None when unset (torch's default is -1 ms)."""
    return as_seconds(source if source is None or isinstance(source, timedelta) else getattr(source, "timeout", None))


def as_list(tensors: Any) -> list:
    """A list from a bare tensor (the DDP join hook passes one) or any sequence."""
    if type(tensors) is list:
        return tensors
    if isinstance(tensors, _Tensor):
        return [tensors]
    return list(tensors)


def check_root(group: Any, root: int, what: str) -> int:
    root = int(root)
    if not 0 <= root < group._size:
        raise ValueError(f"{group._who()}: {what} root {root} is not a rank of {group._desc} (size {group._size})")
    return root


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True if two tensors' memory ranges overlap (MPI forbids aliased send and receive buffers)."""
    if a.device != b.device or a.nbytes == 0 or b.nbytes == 0:
        return False
    pa, pb = a.data_ptr(), b.data_ptr()
    return pa < pb + b.nbytes and pb < pa + a.nbytes
