"""DDP's gradient buckets carried from the DDP a recovery drops to the one it makes (torch has no option for it).

A fresh DDP reduces its first step in one bucket of the parameters in their order, then rebuilds its buckets in the
order the gradients came. Gloo's ring allreduce sums each element in an order set by its place in the bucket, so a
step redone after a recovery in the first layout differs, in the last bits, from the same step of a run without the
loss (measured on gloo, 4 ranks: the same parameters and local gradients, summed in each layout's ring order). Both
functions use torch internals and fall back to DDP's own layout where torch does not have them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["laid_out", "layout_of"]


def layout_of(model: DistributedDataParallel, module: nn.Module) -> list[list[int]] | None:
    """`model`'s gradient buckets as it reduces them now: each one's parameters, in order, as indices into
    `module.parameters()` (after its first step DDP rebuilds them in the order the gradients came); None where torch
    does not tell."""
    where = {id(parameter): index for index, parameter in enumerate(module.parameters())}
    try:
        buckets = model.reducer._get_zeros_like_grad_buckets()
        return [[where[id(parameter)] for parameter in bucket.parameters()] for bucket in buckets]
    except (AttributeError, RuntimeError, KeyError):
        return None


@contextlib.contextmanager
def laid_out(module: nn.Module, layout: list[list[int]] | None) -> Iterator[None]:
    """A DDP made inside lays its gradient buckets out as `layout` (indices into `module.parameters()`) from its first
    step: DDP's assignment of its first buckets is replaced while it is made. A layout that does not fit DDP's
    parameters (another model), or a torch without that assignment, is left to DDP."""
    original = getattr(dist, "_compute_bucket_assignment_by_size", None)
    if layout is None or original is None:
        yield
        return
    parameters = list(module.parameters())

    def assign(tensors: list[torch.Tensor], limits: list[int], *rest: Any) -> tuple[list[list[int]], list[int]]:
        where = {id(tensor): index for index, tensor in enumerate(tensors)}
        try:
            wanted = [[where[id(parameters[index])] for index in bucket] for bucket in layout]
        except (KeyError, IndexError):
            return original(tensors, limits, *rest)
        if sorted(index for bucket in wanted for index in bucket) != list(range(len(tensors))):
            return original(tensors, limits, *rest)
        return list(reversed(wanted)), [max(limits)] * len(wanted)  # DDP reverses them both

    setattr(dist, "_compute_bucket_assignment_by_size", assign)  # noqa: B010 - torch's own, for this DDP only
    try:
        yield
    finally:
        setattr(dist, "_compute_bucket_assignment_by_size", original)  # noqa: B010
