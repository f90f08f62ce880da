"""MPIProcessGroup: a torch.distributed ProcessGroup whose communication is an mpi4py communicator.

The operations live in two mixins (`collectives.py`, `p2p.py`); this module owns what they share:
the communicator, timeouts, the per-(dtype, op) reduction cache, turning an MPI request into a
Work (or completing it on the spot), and the bookkeeping that makes sure no error is lost.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from mpi4py import MPI

from .. import abort
from . import record
from .collectives import CollectiveOps
from .dtypes import Plan, reduction_plan
from .errors import CollectiveError
from .lost import failure
from .movement import DataMovementOps
from .options import timeout_of
from .p2p import PointToPointOps
from .ring import ring_min_bytes
from .work import DONE, MPIWork

__all__ = ["BACKEND_NAME", "MPIProcessGroup"]

BACKEND_NAME = "mpi4py"
DEVICES = ("cpu", "cuda")  # the devices torch gets this backend for
_FAST_SPINS = 256  # Test() calls (~0.1-0.3 µs each) before a synchronous call builds a Work and backs off


# torch's stubs type allgather/alltoall/barrier by their C++ overloads; these take every Python call form of them.
class MPIProcessGroup(CollectiveOps, DataMovementOps, PointToPointOps, dist.ProcessGroup):  # type: ignore[misc]
    """A process group over `comm`; `global_ranks[i]` is the torch global rank of group rank i."""

    def __init__(
        self,
        comm: MPI.Intracomm,
        global_ranks: list[int],
        timeout: float,
        name: str = "world",
        shrinker: Callable[[MPIProcessGroup, list[int]], Any] | None = None,
        survivors: bool = False,
    ) -> None:
        dist.ProcessGroup.__init__(self, comm.Get_rank(), comm.Get_size())  # type: ignore[call-arg]  # (rank, size) form
        self._comm = comm
        self._ring_comm = comm.Dup() if comm.Get_size() > 1 else comm  # internal traffic, apart from users' tags
        self._ring_min_bytes = ring_min_bytes()  # all_reduce from this size goes through the ring
        self._ring_seq = 0  # ring all-reduces issued so far: each gets its own tag on _ring_comm
        self._ring_scratch: dict[torch.dtype, list] = {}  # free receive buffers, reused: fresh pages cost page faults
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        self._ranks = list(global_ranks)
        self._timeout = float(timeout)
        self._desc = f"group [{','.join(map(str, self._ranks))}]"
        self._global_rank = self._ranks[self._rank]
        self._plans: dict[Any, tuple] = {}
        self._outstanding: list[MPIWork] = []  # async works nobody has waited for yet
        self._orphans: list[MPIWork] = []  # failed or timed-out works whose MPI request is still in flight
        self._coalesced: list[Any] | None = None
        self._closed = False
        self._group_name = ""
        self._group_desc = ""
        self._ledger_name = name  # the group in the ledger: "world" or its global ranks, "[0, 1]"
        self._gseq = 0  # collectives issued on this group (the compiled backend over it sets it before each)
        self._shrinker = shrinker  # what torch's shrink_group calls (the package's: it makes the next group)
        self._survivors = survivors  # ULFM: a ring's wait ends once a member failed (MPIWork, lost.interrupted)

    # -- identity -------------------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - torch's C++ name
        return BACKEND_NAME

    def _get_backend_name(self) -> str:
        return BACKEND_NAME

    # torch asks a group for its per-device c10d Backend (batch_isend_irecv, new_group's split source, abort, the
    # time estimator) and reads these flags off it. This group registers none: it is its own backend on the devices
    # it is registered for, and does none of those optional things (batch_isend_irecv issues each op on its own),
    # but shrinking: dist.shrink_group (shrinking.py).
    supports_splitting = False
    supports_coalescing = False
    supports_time_estimate = False
    supports_shrinking = True

    def shrink(self, ranks_to_exclude: list[int], shrink_flags: int = 0, opts_override: Any = None) -> Any:
        """torch's shrink_group: the backend of this group's ranks but `ranks_to_exclude` (group ranks), which failed;
        this group is abandoned. The compiled backend over this group calls it too."""
        if self._shrinker is None:
            raise ValueError(f"{self._who()}: {self._desc} cannot shrink (made outside torch's new_group)")
        return self._shrinker(self, [int(rank) for rank in ranks_to_exclude])

    def _get_backend(self, device: Any) -> Any:
        kind = torch.device(device).type
        if kind not in DEVICES:
            raise RuntimeError(f"No backend type associated with device type {kind}")
        return self

    # torch's base class keeps the name on its (absent) C++ backend: keep it here instead
    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._group_name = name

    def getGroupName(self) -> str:  # noqa: N802
        return self._group_name

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._group_desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_desc

    def _who(self) -> str:
        return f"rank {self._global_rank}"

    @property
    def comm(self) -> MPI.Intracomm:
        """The MPI communicator this group runs on (group rank i is communicator rank i)."""
        return self._comm

    def __repr__(self) -> str:
        return f"<MPIProcessGroup {self._desc} rank {self._rank}/{self._size}>"

    # -- reductions -----------------------------------------------------------------------------
    def _plan(self, dtype: torch.dtype, op: str) -> tuple:
        """(MPI datatype, MPI op, compute dtype or None, average?) for a dtype and op name, cached."""
        key = (dtype, op)
        plan = self._plans.get(key)
        if plan is None:
            p: Plan = reduction_plan(dtype, op)
            plan = self._plans[key] = (getattr(MPI, p.mpi_type), getattr(MPI, p.mpi_op), p.compute, p.average)
        return plan

    # -- requests to works ----------------------------------------------------------------------
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
    ) -> Any:
        """Turn issued request(s) into a Work; a synchronous op is completed before returning.

        With the ledger on, the call is recorded: a collective under `name` (with its group `root`, if any),
        point-to-point (`peer`, e.g. "dst=2") as `send` or `recv`.
        """
        call = None
        if record.ENABLED:
            if peer is None:
                self._gseq += 1
                shown = "" if root is None else f"root={self._ranks[root]}"
                call = record.start(name, shown, result, self._ledger_name, self._gseq, not async_op)
            else:
                call = record.start(name.split()[0], peer, result, self._ledger_name, 0, not async_op)
        if not async_op and steps is None and status is None and type(req) is not list:
            test = req.Test
            try:
                for _ in range(_FAST_SPINS):  # the fast path: small messages finish within microseconds
                    if test():
                        if finish is not None:
                            finish()
                        record.ended(call)
                        return DONE  # no Work object, nothing to track
            except BaseException:  # a failed call is over too: a hang report must not show it waiting
                record.ended(call)
                raise
        work = MPIWork(self, name, req, keep, result, finish, steps, status, timeout_of(tmo))
        work._call = call
        if self._coalesced is not None:
            self._coalesced.append(work)
        if async_op:
            if not work._poll() or work._error is not None:
                self._outstanding.append(work)  # pending, or failed before anyone could wait
            return work
        try:
            work.wait()
        finally:
            record.ended(call)
        return DONE

    def _failure(self, name: str, error: BaseException) -> CollectiveError:
        """The error `name` raises for an MPI `error`: RanksLostError (the peers released) when ranks died."""
        text = f"{self._who()}: {name} on {self._desc} failed"
        return failure(text, error, f"{name} #{self._gseq} on {self._ledger_name}", (self._comm, self._ring_comm))

    def _check(self) -> None:
        """Before each operation: settle older async works; raise an error nobody has seen yet."""
        if self._closed:
            raise CollectiveError(f"{self._who()}: {self._desc} has been shut down or aborted")
        if self._orphans:
            self._orphans = [w for w in self._orphans if not w._is_settled()]
        if self._outstanding:
            self._reap()

    def _reap(self) -> None:
        keep: list[MPIWork] = []
        now = time.monotonic()
        error: BaseException | None = None
        pending = self._outstanding
        for i, work in enumerate(pending):
            if work._event is not None:  # the progress thread owns it
                if not work._done:
                    keep.append(work)
                    continue
            elif not work._done and not work._poll() and not work._expired(now):
                keep.append(work)
                keep.extend(w for w in pending[i + 1 :] if not w._done or (w._error and not w._observed))
                break
            if work._error is not None and not work._observed and error is None:
                work._observed = True
                error = work._error
        self._outstanding = keep
        if error is not None:
            raise CollectiveError(
                f"an earlier asynchronous operation failed and nobody waited for it: {error}"
            ) from error

    def _orphan(self, work: MPIWork) -> None:
        """Keep a request that is still in flight (and its buffers) alive until MPI finishes it."""
        self._orphans.append(work)

    # -- coalescing (torch's _coalescing_manager with a device) ---------------------------------
    def start_coalescing(self, device: Any = None) -> None:
        if self._coalesced is not None:
            raise RuntimeError(f"{self._who()}: coalescing already started on {self._desc}")
        self._coalesced = []

    _start_coalescing = start_coalescing

    def end_coalescing(self, device: Any = None) -> Any:
        works, self._coalesced = self._coalesced or [], None
        if not works:
            return DONE
        reqs = [w for w in works if not w._done]
        return MPIWork(self, "coalesced operations", None, reqs, [t for w in works for t in w._result], _wait_all(reqs))

    _end_coalescing = end_coalescing

    # -- lifetime -------------------------------------------------------------------------------
    def set_timeout(self, timeout: Any) -> None:
        self._timeout = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)

    def shutdown(self) -> None:
        """Finish or time out every outstanding operation; an error nobody saw ends the job."""
        if self._closed:
            return
        lost = []
        for work in self._outstanding:
            try:
                work.wait()
            except Exception as exc:  # noqa: BLE001
                if not work._observed or work._error is exc:
                    lost.append(exc)
        self._outstanding = []
        self._closed = True
        if lost:
            text = "\n".join(f"[{self._who()}] {exc}" for exc in lost)
            print(
                f"{text}\n[{self._who()}] hpcdist.mpi_backend: asynchronous operation(s) failed and nobody "
                "waited for them; aborting the job",
                file=sys.stderr,
            )
            abort.abort_job(1)
        self._free()

    def abort(self) -> None:
        """Stop using this group: pending operations are abandoned (MPI cannot cancel collectives)."""
        self._orphans.extend(self._outstanding)
        self._outstanding = []
        self._closed = True

    def _free(self) -> None:
        if not self._orphans and self._comm not in (MPI.COMM_WORLD, MPI.COMM_NULL):
            with contextlib.suppress(MPI.Exception):  # a communicator MPI already freed at finalize
                self._comm.Free()
        if not self._orphans:
            self._comm = MPI.COMM_NULL  # type: ignore[assignment]  # mpi4py types COMM_NULL as a plain Comm

    def split_group(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "the mpi4py backend does not support split_group; use torch.distributed.new_group(ranks)"
        )

    splitGroup = split_group  # noqa: N815 - the C++ name the trampoline looks for

    def merge_remote_group(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the mpi4py backend does not support merge_remote_group")

    mergeRemoteGroup = merge_remote_group  # noqa: N815

    def _set_sequence_number_for_group(self) -> None:
        pass


def _translating(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`method`, raising an MPI error met while issuing the operation as the group's error (`_failure`) for `name`."""

    @functools.wraps(method)
    def call(self: MPIProcessGroup, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except MPI.Exception as exc:
            raise self._failure(name, exc) from exc

    return call


for _method, _name in {  # each operation, as its errors and the ledger name it
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "reduce": "reduce",
    "broadcast": "broadcast",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor_coalesced",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
    "allgather": "all_gather",
    "allgather_coalesced": "all_gather_coalesced",
    "all_gather_single": "all_gather_into_tensor",
    "all_gather_single_coalesced": "all_gather_into_tensor_coalesced",
    "gather": "gather",
    "scatter": "scatter",
    "all_to_all_single": "all_to_all_single",
    "alltoall": "all_to_all",
    "send": "send",
    "recv": "recv",
    "recv_anysource": "recv",
}.items():
    setattr(MPIProcessGroup, _method, _translating(getattr(MPIProcessGroup, _method), _name))


def _wait_all(works: list[MPIWork]) -> Any:
    def finish() -> None:
        for work in works:
            work.wait()

    return finish
