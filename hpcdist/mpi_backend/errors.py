"""The mpi backend's errors: a failed operation (torch's DistBackendError), a late one, no compiled backend."""

from __future__ import annotations

import torch.distributed as dist

from ..errors import UsageError, WaitTimeout

__all__ = ["CollectiveError", "CollectiveTimeout", "NativeUnavailable"]


class CollectiveError(dist.DistBackendError):
    """An MPI operation failed; the message names the rank, the operation and the group."""


class CollectiveTimeout(CollectiveError, WaitTimeout):
    """An MPI operation did not complete within the group's timeout."""


class NativeUnavailable(UsageError):
    """The compiled backend was asked for (the MPI_NATIVE setting at 1) and cannot be had: why, and what to do."""
