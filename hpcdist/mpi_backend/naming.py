"""torch's own name, "mpi", for this backend in `dist.new_group(backend=...)` on wheels built without MPI.

    hpcdist.init("mpi")                          # the default group runs on "mpi4py"
    sub = dist.new_group([0, 1], backend="mpi")  # "mpi4py" too, where torch would say it has no MPI built in

`hpcdist.init("mpi")` and a program's own `init_process_group("mpi")` already mean this backend there; a subgroup
named the same way (as a script written for a torch with MPI names it) now does too. Where torch has its own MPI
backend, "mpi" stays torch's.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch.distributed as dist

__all__ = ["install"]


def install(name: str) -> None:
    """Make `new_group(backend="mpi")`, and torch's helpers that call it (new_subgroups…), mean backend `name`
    where torch has no MPI of its own (idempotent)."""
    c10d = dist.distributed_c10d
    original = c10d.new_group
    if dist.is_mpi_available() or hasattr(original, "_hpcdist_original"):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        backend = bound.arguments.get("backend")
        if isinstance(backend, str) and backend.lower() == "mpi":
            bound.arguments["backend"] = name
        return original(*bound.args, **bound.kwargs)

    new_group._hpcdist_original = original  # type: ignore[attr-defined]
    c10d.new_group = new_group
    dist.new_group = new_group
