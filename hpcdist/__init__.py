"""hpcdist: an MPI-first HPC job toolkit for PyTorch."""

from .bootstrap import Session, init, shutdown
from .env import LaunchEnv
from .errors import UsageError

__all__ = ["LaunchEnv", "Session", "UsageError", "__version__", "init", "shutdown"]

__version__ = "0.1.0"
