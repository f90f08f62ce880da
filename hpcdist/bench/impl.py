"""The ways `hpcdist bench` runs a collective: torch.distributed on each backend's group, and raw mpi4py.

Each implementation fills fresh buffers (`prepare` returns the call to time), reads back its result, and
offers the barrier, device sync and cross-rank max/sum that the timing loop needs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import UsageError
from ..runtime.bootstrap import Session
from ..settingtable import FORENSICS
from .fmt import FLOOR, REFERENCE
from .groups import BackendGroup, fake_group
from .plan import BenchPlan, Counts

__all__ = ["FloorImpl", "Implementation", "MpiImpl", "TorchImpl"]


class Implementation(Protocol):
    """What the timing loop needs of a way to run the collective."""

    name: str
    nranks: int

    def prepare(self, counts: Counts, in_place: bool) -> Callable[[], Any]:
        """Fill fresh buffers and return the call to time."""

    def result(self) -> Any:
        """The last call's output as a numpy array (what #wrong is counted on)."""

    def sync(self) -> None:
        """Wait for the device (a no-op on the CPU)."""

    def barrier(self) -> None:
        """All ranks meet."""

    def max_over_ranks(self, value: float) -> float:
        """The largest `value` over the ranks (a round's time is its slowest rank's)."""

    def sum_over_ranks(self, value: int) -> int:
        """`value` summed over the ranks."""


def _layout(collective: str, counts: Counts, rank: int, rank_block_result: bool) -> tuple[int, int, int]:
    """In place, one buffer: its length, where this rank's input starts, and where its result starts."""
    length = counts.recv if collective == "all_gather" else counts.send
    send_at = rank * counts.param if collective == "all_gather" else 0
    recv_at = rank * counts.param if collective == "reduce_scatter" and rank_block_result else 0
    return length, send_at, recv_at


class TorchImpl:
    """The collective through torch.distributed on one backend's group (see groups.BackendGroup)."""

    def __init__(self, plan: BenchPlan, session: Session, backend: BackendGroup, ledger: bool | None = None) -> None:
        """`ledger` True or False: timed beside its twin with hang forensics' ledger on or off (`switch_ledger`)."""
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.plan, self.session, self.group = torch, dist, plan, session, backend.group
        self.rank, self.nranks, self.device = session.rank, session.world_size, backend.device
        self.name = f"torch/{backend.name}" + (" no forensics" if ledger is False else "")
        self.ledger = ledger
        if ledger is not None and not getattr(dist.all_reduce, "_hpcdist_ledger", False):
            raise UsageError(
                "--without-forensics compares hang forensics on and off, but it is off here (not under an MPI "
                f"launch, or {FORENSICS.name}=0); run under `hpcdist mpirun` or drop --without-forensics"
            )
        self.dtype = getattr(torch, plan.dtype)
        names = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}
        self.op = getattr(dist.ReduceOp, names[plan.op]) if plan.op in names else None
        if plan.op == "avg" and backend.name == "gloo" and "int" in plan.dtype:
            raise UsageError(
                f"gloo cannot average {plan.dtype} (its avg divides in floating point); "
                "use --op sum, a floating-point --dtype, or another --backend"
            )
        self.recv: Any = None

    def switch_ledger(self) -> None:
        """Before this implementation's calls: the mpi backend records them (or not), as this twin is timed."""
        if self.ledger is not None and "hpcdist.mpi_backend.record" in sys.modules:
            from ..mpi_backend import record

            record.enable(self.ledger)

    def _fn(self, name: str) -> Any:
        """dist's function `name`; without the ledger, the one the dist.* wrapper wraps."""
        fn = getattr(self.dist, name)
        return getattr(fn, "__wrapped__", fn) if self.ledger is False else fn

    def _tensor(self, values: Any) -> Any:
        return self.torch.from_numpy(values).to(device=self.device, dtype=self.dtype)

    def prepare(self, counts: Counts, in_place: bool) -> Callable[[], Any]:
        """Fill fresh buffers and return the call to time."""
        from .data import send_values

        plan, torch = self.plan, self.torch
        values = self._tensor(send_values(plan.collective, plan.op, self.rank, self.nranks, counts))
        if in_place:
            length, send_at, recv_at = _layout(plan.collective, counts, self.rank, True)
            buf = torch.zeros(length, device=self.device, dtype=self.dtype)
            buf[send_at : send_at + counts.send].copy_(values)
            send, self.recv = buf[send_at : send_at + counts.send], buf[recv_at : recv_at + counts.recv]
        else:
            send, self.recv = values, torch.zeros(counts.recv, device=self.device, dtype=self.dtype)
        return self._call(send, self.recv, in_place)

    def _call(self, send: Any, recv: Any, in_place: bool) -> Callable[[], Any]:
        """torch's all_reduce, broadcast and reduce work in place: out-of-place copies the input first."""
        dist, op, root, rank, n, coll = self.dist, self.op, self.plan.root, self.rank, self.nranks, self.plan.collective
        g = self.group  # spans every rank, so global ranks are group ranks
        copy = not in_place and (coll != "broadcast" or rank == root)
        if coll in ("all_reduce", "broadcast", "reduce"):
            fn = self._fn(coll)
            call = {
                "all_reduce": lambda: fn(recv, op=op, group=g),
                "broadcast": lambda: fn(recv, src=root, group=g),
                "reduce": lambda: fn(recv, dst=root, op=op, group=g),
            }[coll]
            return (lambda: (recv.copy_(send), call())) if copy else call
        if coll == "all_gather":  # torch 2.13 renamed all_gather_into_tensor and reduce_scatter_tensor
            gather = getattr(dist, "all_gather_single", None) or self._fn("all_gather_into_tensor")
            return lambda: gather(recv, send, group=g)
        if coll == "reduce_scatter":
            scatter = getattr(dist, "reduce_scatter_single", None) or self._fn("reduce_scatter_tensor")
            return lambda: scatter(recv, send, op=op, group=g)
        if coll == "alltoall":
            a2a = self._fn("all_to_all_single")
            return lambda: a2a(recv, send, group=g)
        if n == 1:
            return lambda: recv.copy_(send)  # torch refuses to send to itself; one rank's ring is a copy
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % n, g), dist.P2POp(dist.irecv, recv, (rank - 1) % n, g)]
        return lambda: [request.wait() for request in dist.batch_isend_irecv(ops)]

    def result(self) -> Any:
        """This rank's received data as float64 numpy."""
        return self.recv.to("cpu", self.torch.float64).numpy()

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)

    def max_over_ranks(self, value: float) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.group)
        return float(t.item())

    def sum_over_ranks(self, value: int) -> int:
        t = self.torch.tensor([value], dtype=self.torch.int64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM, group=self.group)
        return int(t.item())


class MpiImpl:
    """The same collective as raw mpi4py calls on numpy buffers (the --reference rows `raw-mpi4py`, and `raw-again`:
    the same call timed a second time in each round, whose distance from the first is the run's own noise).

    The buffers are numpy's own, the memory a user's script would hand MPI: numpy asks the kernel for transparent
    huge pages for its large arrays, as torch's allocator does in hpcdist's ranks (THP_MEM_ALLOC_ENABLE=1 unless the
    user set it). With THP_MEM_ALLOC_ENABLE=0 the torch rows lose the huge pages and raw keeps them.
    """

    def __init__(self, plan: BenchPlan, session: Session, name: str = REFERENCE) -> None:
        import numpy as np
        from mpi4py import MPI

        self.name, self.np, self.MPI, self.comm, self.plan = name, np, MPI, MPI.COMM_WORLD, plan
        self.rank, self.nranks = self.comm.rank, self.comm.size
        if (self.rank, self.nranks) != (session.rank, session.world_size):
            raise UsageError(
                f"--reference needs the job's ranks in MPI_COMM_WORLD, but mpi4py sees rank {self.rank} of "
                f"{self.nranks} where the launch says rank {session.rank} of {session.world_size}; start the job "
                "with mpirun/mpiexec (e.g. hpcdist mpirun -np N -- hpcdist bench …) or srun --mpi=pmix, "
                "or drop --reference"
            )
        self.dtype = np.dtype(plan.dtype)
        self.op: Any = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}.get(plan.op)
        self.recv: Any = None

    def prepare(self, counts: Counts, in_place: bool) -> Callable[[], Any]:
        """Fill fresh numpy buffers and return the call to time."""
        from .data import send_values

        plan = self.plan
        values = self._zeros(counts.send)
        values[:] = send_values(plan.collective, plan.op, self.rank, self.nranks, counts)
        buf: Any = None
        if in_place:
            length, send_at, recv_at = _layout(plan.collective, counts, self.rank, False)
            buf = self._zeros(length)
            buf[send_at : send_at + counts.send] = values
            send: Any = self.MPI.IN_PLACE
            self.recv = buf[recv_at : recv_at + counts.recv]
        else:
            send, self.recv = values, self._zeros(counts.recv)
        return self._call(send, self.recv, buf)

    def _zeros(self, length: int) -> Any:
        """A numpy array of zeros."""
        return self.np.zeros(length, self.dtype)

    def _call(self, send: Any, recv: Any, buf: Any) -> Callable[[], Any]:
        comm, op, root, rank, n = self.comm, self.op, self.plan.root, self.rank, self.nranks
        coll, whole = self.plan.collective, recv if buf is None else buf
        if coll == "all_reduce":
            return lambda: comm.Allreduce(send, recv, op)
        if coll == "all_gather":
            return lambda: comm.Allgather(send, whole)
        if coll == "reduce_scatter":
            return lambda: comm.Reduce_scatter_block(send, whole, op)
        if coll == "broadcast":
            if buf is not None or rank != root:
                return lambda: comm.Bcast(recv, root)

            def copy_then_bcast() -> None:  # out of place on the root: its data starts in `send`
                self.np.copyto(recv, send)
                comm.Bcast(recv, root)

            return copy_then_bcast
        if coll == "reduce":
            mine = recv if buf is not None and rank != root else send  # in place, only the root passes IN_PLACE
            return lambda: comm.Reduce(mine, recv, op, root)
        if coll == "alltoall":
            return lambda: comm.Alltoall(send, whole)
        dest, source = (rank + 1) % n, (rank - 1) % n
        if buf is not None:
            return lambda: comm.Sendrecv_replace(recv, dest, source=source)
        return lambda: comm.Sendrecv(send, dest, recvbuf=recv, source=source)

    def result(self) -> Any:
        return self.recv.astype(self.np.float64)

    def sync(self) -> None:
        pass

    def barrier(self) -> None:
        self.comm.Barrier()

    def max_over_ranks(self, value: float) -> float:
        return float(self.comm.allreduce(value, op=self.MPI.MAX))

    def sum_over_ranks(self, value: int) -> int:
        return int(self.comm.allreduce(value, op=self.MPI.SUM))


class FloorImpl(TorchImpl):
    """torch's floor (the --reference row `torch-floor`): each iteration the same dist.* call on torch's
    FakeProcessGroup, a C++ backend that does nothing, without hang forensics' wrapper, then raw mpi4py's call on
    numpy buffers. Timed together, so torch's dispatch costs what it costs beside MPI's call (caches, the ranks'
    skew): what a backend that adds nothing to torch and MPI would take."""

    # FakeProcessGroup copies the data of these, as if it had moved it: its dispatch is timed on empty tensors
    _COPYING = frozenset({"all_gather", "reduce_scatter", "alltoall"})

    def __init__(self, plan: BenchPlan, session: Session) -> None:
        super().__init__(plan, session, fake_group(session))
        self.name, self.raw = FLOOR, MpiImpl(plan, session)

    def prepare(self, counts: Counts, in_place: bool) -> Callable[[], Any]:
        """torch's call on the fake group, then raw mpi4py's on fresh buffers."""
        dispatch = super().prepare(Counts(0, 0, 0) if self.plan.collective in self._COPYING else counts, in_place)
        move = self.raw.prepare(counts, in_place)
        return lambda: (dispatch(), move())

    def result(self) -> Any:
        """What raw mpi4py's call received."""
        return self.raw.result()

    def _fn(self, name: str) -> Any:
        fn = getattr(self.dist, name)
        return getattr(fn, "__wrapped__", fn)

    # The rounds meet and agree over MPI, as the raw rows' do (--reference needs it).
    def barrier(self) -> None:
        self.raw.barrier()

    def max_over_ranks(self, value: float) -> float:
        return self.raw.max_over_ranks(value)

    def sum_over_ranks(self, value: int) -> int:
        return self.raw.sum_over_ranks(value)
