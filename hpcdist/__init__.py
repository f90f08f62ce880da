"""hpcdist: an MPI-first HPC job toolkit for PyTorch."""

import importlib
from typing import TYPE_CHECKING

from ._version import __version__
from .errors import (
    JobFailed,
    LaunchTimeout,
    MapTimeout,
    RankFailed,
    RanksLost,
    RendezvousTimeout,
    TooFewRanks,
    UsageError,
    WaitTimeout,
)
from .values import ARRAY_TASK, RANK

__all__ = [
    "ARRAY_TASK",
    "RANK",
    "Job",
    "JobFailed",
    "LaunchEnv",
    "LaunchTimeout",
    "MapTimeout",
    "Preempted",
    "RankFailed",
    "RanksLost",
    "RendezvousTimeout",
    "Session",
    "StopAtStepBoundary",
    "TooFewRanks",
    "UsageError",
    "WaitTimeout",
    "__version__",
    "init",
    "launch",
    "map",
    "region",
    "restart_count",
    "shutdown",
    "submit",
]


# Where each of the other names lives: loaded on first use, so that `import hpcdist` (and every text-only command,
# which imports it as the package of hpcdist.cli) costs no more than the errors and values above.
_LAZY = {
    "Session": "runtime.bootstrap",
    "init": "runtime.bootstrap",
    "shutdown": "runtime.bootstrap",
    "LaunchEnv": "runtime.env",
    "Preempted": "workloads.preemption",
    "StopAtStepBoundary": "workloads.preemption",
    "restart_count": "workloads.preemption",
    "map": "workloads.taskmap",
    "launch": "calling.pyfunc",
    "region": "forensics.timeline",
    "submit": "jobs.submit",
    "Job": "jobs.submit",
}

if TYPE_CHECKING:
    from .calling.pyfunc import launch
    from .forensics.timeline import region
    from .jobs.submit import Job, submit
    from .runtime.bootstrap import Session, init, shutdown
    from .runtime.env import LaunchEnv
    from .workloads.preemption import Preempted, StopAtStepBoundary, restart_count
    from .workloads.taskmap import map  # noqa: A004  (hpcdist.map replaces the seeds' ray.get over a task list)


def __getattr__(name: str) -> object:
    """The public names of `_LAZY`, imported from their module on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'hpcdist' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    """Every public name, loaded or not (for completion in a shell or notebook)."""
    return sorted({*globals(), *_LAZY})
