"""hpcdist: an MPI-first HPC job toolkit for PyTorch."""

from .bootstrap import Session, init, shutdown
from .env import LaunchEnv
from .errors import UsageError
from .taskmap import map  # noqa: A004  (hpcdist.map is the seeds' replacement for ray.get over a task list)

__all__ = ["LaunchEnv", "Session", "UsageError", "__version__", "init", "map", "shutdown"]

__version__ = "0.1.0"
