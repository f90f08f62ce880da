"""hpcdist: an MPI-first HPC job toolkit for PyTorch."""

from ._version import __version__
from .errors import LaunchTimeout, MapTimeout, RankFailed, RendezvousTimeout, UsageError, WaitTimeout
from .launching.pyfunc import launch
from .runtime.bootstrap import Session, init, shutdown
from .runtime.env import LaunchEnv
from .values import RANK
from .workloads.preemption import Preempted, StopAtStepBoundary, restart_count
from .workloads.taskmap import map  # noqa: A004  (hpcdist.map is the seeds' replacement for ray.get over a task list)

__all__ = [
    "RANK",
    "LaunchEnv",
    "LaunchTimeout",
    "MapTimeout",
    "Preempted",
    "RankFailed",
    "RendezvousTimeout",
    "Session",
    "StopAtStepBoundary",
    "UsageError",
    "WaitTimeout",
    "__version__",
    "init",
    "launch",
    "map",
    "restart_count",
    "shutdown",
]
