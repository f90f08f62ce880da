"""hpcdist: an MPI-first HPC job toolkit for PyTorch."""

from typing import TYPE_CHECKING

from ._version import __version__
from .errors import JobFailed, LaunchTimeout, MapTimeout, RankFailed, RendezvousTimeout, UsageError, WaitTimeout
from .runtime.bootstrap import Session, init, shutdown
from .runtime.env import LaunchEnv
from .values import ARRAY_TASK, RANK
from .workloads.preemption import Preempted, StopAtStepBoundary, restart_count
from .workloads.taskmap import map  # noqa: A004  (hpcdist.map is the seeds' replacement for ray.get over a task list)

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
    "submit",
]


if TYPE_CHECKING:
    from .jobs.submit import Job, submit
    from .launching.pyfunc import launch


def __getattr__(name: str) -> object:
    """`hpcdist.launch`, `submit` and `Job`, loaded on first use: `import hpcdist` stays as quick as without them."""
    if name == "launch":
        from .launching.pyfunc import launch

        return launch
    if name in ("submit", "Job"):
        from .jobs import submit as module

        return getattr(module, name)
    raise AttributeError(f"module 'hpcdist' has no attribute {name!r}")
