"""What the operation mixins (collectives, movement, p2p) use of MPIProcessGroup, declared once for the checker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from mpi4py import MPI

__all__ = ["GroupBase"]


class GroupBase:
    """The communicator, the group's shape, and the request-to-Work machinery that group.py implements."""

    _comm: MPI.Intracomm
    _size: int
    _rank: int
    _ranks: list[int]
    _desc: str
    _ring_min_bytes: int
    _ring_comm: MPI.Intracomm
    _ring_seq: int
    _ring_scratch: dict[torch.dtype, list[Any]]
    _timeout: float
    _outstanding: list[Any]
    _orphans: list[Any]
    _closed: bool

    if TYPE_CHECKING:  # implemented by MPIProcessGroup; declared here so each mixin is checked on its own

        def _who(self) -> str: ...

        def _failure(self, name: str, error: BaseException) -> Exception: ...

        def _check(self) -> None: ...

        def _plan(self, dtype: torch.dtype, op: str) -> tuple[Any, Any, torch.dtype | None, bool]: ...

        def _run(
            self,
            name: str,
            req: Any,
            keep: Any,
            result: list[torch.Tensor],
            finish: Any,
            async_op: bool,
            status: Any = None,
            steps: Any = None,
            tmo: Any = None,
            peer: str | None = None,
            root: int | None = None,
        ) -> Any: ...
