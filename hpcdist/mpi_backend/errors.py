"""The mpi backend's errors: torch's DistBackendError for a failed operation, and a WaitTimeout for a late one."""

from __future__ import annotations

import torch.distributed as dist

from ..errors import WaitTimeout

__all__ = ["CollectiveError", "CollectiveTimeout"]


class CollectiveError(dist.DistBackendError):
    """An MPI operation failed; the message names the rank, the operation and the group."""


class CollectiveTimeout(CollectiveError, WaitTimeout):
    """An MPI operation did not complete within the group's timeout."""
