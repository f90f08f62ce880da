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
    """The compiled backend was asked for ($HPCDIST_MPI_NATIVE=1) and cannot be built or loaded: why, what to do."""
