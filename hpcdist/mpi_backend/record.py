"""The backend's record of its calls for hang forensics: the Python group's, and the compiled ring's (native.cpp).

Off until `enable` (the runtime turns it on with forensics and hands `calls` and `oldest` to them). Each call is a
`commcall.Call` from the moment it is issued: times in seconds of CLOCK_MONOTONIC, gseq the how-many-th collective
on its group, backward whether autograd's backward pass issued it. The compiled ring builds its Calls itself.
"""

from __future__ import annotations

import time
from collections import deque
from operator import attrgetter
from typing import Any

import torch

from ..commcall import Call, dtype_name

__all__ = ["Issued", "calls", "enable", "keep", "oldest", "start"]

ENABLED = False  # read on every call of the Python group
_monotonic = time.monotonic
_graph_task = torch._C._current_graph_task_id  # -1 outside a backward pass
_STARTED = attrgetter("started")


class Issued(Call):
    """A Python group's call as it runs: a Call that also knows whether someone waits on it (only such a call can
    hang). It leaves the record as a plain Call (`copy`)."""

    __slots__ = ("watched",)
    watched: bool


_CALLS: deque[Issued] = deque(maxlen=256)
_append = _CALLS.append
_new = object.__new__
_Tensor = torch.Tensor


def enable(on: bool = True) -> None:
    """Record calls from now on (or stop), in both implementations."""
    global ENABLED
    ENABLED = on
    module = _compiled()
    if module is not None:
        module.set_ledger(on)


def keep(size: int) -> None:
    """Keep the last `size` calls of each implementation from now on (a trace keeps more than the hang report)."""
    global _CALLS, _append
    _CALLS = deque(maxlen=size)
    _append = _CALLS.append
    module = _compiled()
    if module is not None:
        module.set_ledger(ENABLED, size)


def _compiled() -> Any:
    from . import native

    return native.loaded()


def start(op: str, peer: str, tensors: Any, group: str, gseq: int, watched: bool) -> Issued:
    """Record a Python group's call as it is issued; the caller ends it (`ended`) and says when someone waits on it
    (`watched`)."""
    tensor = tensors[0] if tensors else None
    if type(tensor) is list:
        tensor = tensor[0] if tensor else None
    # Made field by field, which costs less than __init__ on this path, every call's (test_commcall checks them all).
    call = _new(Issued)
    call.op = op
    call.peer = peer
    if type(tensor) is _Tensor or isinstance(tensor, _Tensor):
        call.shape = tensor.shape
        call.dtype = tensor.dtype
    else:
        call.shape = ()
        call.dtype = ""
    call.group = group
    call.gseq = gseq
    call.started = _monotonic()
    call.ended = None
    call.done = False
    call.backward = _graph_task() != -1
    call.seq = 0
    call.watched = watched
    _append(call)
    return call


def ended(call: Issued | None) -> None:
    """Mark a recorded call finished (or failed): `Call.finish`, inlined on this path."""
    if call is not None and not call.done:
        call.ended = _monotonic()
        call.done = True


def watched(call: Issued | None) -> None:
    """Mark an asynchronous call as waited on: from now on it counts as a wait that can hang."""
    if call is not None:
        call.watched = True


def calls() -> list[Call]:
    """Every recorded call of both implementations, oldest first, as copies (dtype names as torch spells them)."""
    recorded = [call.copy() for call in list(_CALLS)]
    module = _compiled()
    if module is not None:
        for call in module.ledger(Call):  # Calls made by field name, dtypes as c10 names them
            call.dtype = dtype_name(call.dtype)
            recorded.append(call)
    recorded.sort(key=_STARTED)
    return recorded


def oldest() -> float | None:
    """When the oldest call still in flight that someone waits on started (monotonic seconds), or None."""
    starts = [c.started for c in list(_CALLS) if not c.done and c.watched]
    module = _compiled()
    if module is not None:
        native_start = module.oldest_pending()
        if native_start:
            starts.append(native_start)
    return min(starts) if starts else None
