"""Workloads run as `hpcdist run NAME`: each checks its own result and returns a problem or None."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["WORKLOADS", "load"]

# name -> "module:function"; imported only when run, so listing them never imports torch
WORKLOADS = {
    "p2p": "p2p:run",
    "broadcast": "collectives:broadcast",
    "allreduce": "collectives:allreduce",
    "reduce": "collectives:reduce",
    "gather": "collectives:gather",
}


def load(name: str) -> Callable[[Any], str | None]:
    """The workload function for a name in WORKLOADS."""
    module, func = WORKLOADS[name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), func)
