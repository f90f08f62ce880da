"""hpcdist: an MPI-first HPC job toolkit for PyTorch."""

from ._version import __version__
from .errors import MapTimeout, RendezvousTimeout, UsageError, WaitTimeout
from .runtime.bootstrap import Session, init, shutdown
from .runtime.env import LaunchEnv
from .workloads.preemption import Preempted, StopAtStepBoundary, restart_count
from .workloads.taskmap import map  # noqa: A004  (hpcdist.map is the seeds' replacement for ray.get over a task list)

__all__ = [
    "LaunchEnv",
    "MapTimeout",
    "Preempted",
    "RendezvousTimeout",
    "Session",
    "StopAtStepBoundary",
    "UsageError",
    "WaitTimeout",
    "__version__",
    "init",
    "map",
    "restart_count",
    "shutdown",
]
