"""The backend's record of its calls for hang forensics: the Python group's, and the compiled ring's (native.cpp).

Off until `enable` (the runtime turns it on with forensics and hands `calls` and `oldest` to them). Each call is
(op, peer, shape, dtype, group, gseq, started, ended, backward): times in seconds of CLOCK_MONOTONIC (ended 0.0
while in flight), gseq the how-many-th collective on its group, backward whether autograd's backward pass issued it.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import torch

__all__ = ["calls", "enable", "keep", "oldest", "start"]

ENABLED = False  # read on every call of the Python group
_CALLS: deque[list[Any]] = deque(maxlen=256)
_monotonic = time.monotonic
_graph_task = torch._C._current_graph_task_id  # -1 outside a backward pass
_ENDED, _WATCHED = 7, 9


def enable(on: bool = True) -> None:
    """Record calls from now on (or stop), in both implementations."""
    global ENABLED
    ENABLED = on
    module = _compiled()
    if module is not None:
        module.set_ledger(on)


def keep(size: int) -> None:
    """Keep the last `size` calls of each implementation from now on (a trace keeps more than the hang report)."""
    global _CALLS
    _CALLS = deque(maxlen=size)
    module = _compiled()
    if module is not None:
        module.set_ledger(ENABLED, size)


def _compiled() -> Any:
    from . import native

    return native.loaded()


def start(op: str, peer: str, tensors: Any, group: str, gseq: int, watched: bool) -> list[Any]:
    """Record a Python group's call as it is issued; the caller sets [7] (ended) and [9] (someone waits on it)."""
    tensor = tensors[0] if tensors else None
    if type(tensor) is list:
        tensor = tensor[0] if tensor else None
    shape, dtype = (tensor.shape, tensor.dtype) if isinstance(tensor, torch.Tensor) else ((), "")
    call = [op, peer, shape, dtype, group, gseq, _monotonic(), 0.0, _graph_task() != -1, watched]
    _CALLS.append(call)
    return call


def ended(call: list[Any] | None) -> None:
    """Mark a recorded call finished (or failed)."""
    if call is not None and not call[_ENDED]:
        call[_ENDED] = _monotonic()


def watched(call: list[Any] | None) -> None:
    """Mark an asynchronous call as waited on: from now on it counts as a wait that can hang."""
    if call is not None:
        call[_WATCHED] = True


def calls() -> list[tuple[Any, ...]]:
    """Every recorded call of both implementations, oldest first (dtype names as torch or c10 spells them)."""
    rows = [(c[0], c[1], tuple(c[2]), str(c[3]).removeprefix("torch."), *c[4:9]) for c in list(_CALLS)]
    module = _compiled()
    if module is not None:
        rows += module.ledger()
    rows.sort(key=lambda row: row[6])
    return rows


def oldest() -> float | None:
    """When the oldest call still in flight that someone waits on started (monotonic seconds), or None."""
    starts = [c[6] for c in list(_CALLS) if not c[_ENDED] and c[_WATCHED]]
    module = _compiled()
    if module is not None:
        native_start = module.oldest_pending()
        if native_start:
            starts.append(native_start)
    return min(starts) if starts else None
