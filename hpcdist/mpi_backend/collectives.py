"""Reductions, broadcast and barrier: every call form torch's ProcessGroup declares for them.

Each method issues one non-blocking MPI call (Iallreduce, Ireduce, Ibcast, Ireduce_scatter_block,
Ibarrier) on the group's communicator and hands the request to `_run`, which returns a Work or, for a
synchronous call that is already finished, completes it on the spot.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from mpi4py import MPI

from .base import GroupBase
from .buffers import byte_spec, readable, typed_spec, writable
from .options import as_list, check_root, op_of, overlaps
from .ring import RING_DTYPES, ring_allreduce

__all__ = ["CollectiveOps"]

_IN_PLACE = MPI.IN_PLACE
_fromaddress = MPI.buffer.fromaddress
_AllreduceOptions = dist.AllreduceOptions
_SUM = dist.ReduceOp.SUM


def _finish_reduce(target: torch.Tensor, buf: torch.Tensor, average: bool, size: int) -> Any:
    """What to do once a reduction lands in `buf`: average, then copy back into `target` if staged."""
    if not average and buf is target:
        return None

    def finish() -> None:
        if average:
            buf.div_(size)
        if buf is not target:
            target.copy_(buf.view(target.shape) if buf.numel() == target.numel() else buf)

    return finish


class CollectiveOps(GroupBase):
    """all_reduce, reduce, broadcast, reduce_scatter and barrier over an MPI communicator."""

    def _reduce_buffer(self, t: torch.Tensor, name: str) -> tuple:
        """(buffer to reduce in, MPI type, MPI op, finish) for one tensor."""
        mtype, mop, compute, average = self._plan(t.dtype, name)
        buf = readable(t)
        if compute is not None:
            buf = buf.to(compute)
        return buf, mtype, mop, _finish_reduce(t, buf, average, self._size)

    # -- all_reduce ----------------------------------------------------------------------------
    def allreduce(self, tensors: Any, opts: Any = None, timeout: Any = None) -> Any:
        if self._outstanding or self._orphans or self._closed:
            self._check()
        if type(opts) is _AllreduceOptions or isinstance(opts, _AllreduceOptions):
            op = opts.reduceOp
            name = "SUM" if op == _SUM else op_of(op)
            async_op = opts.asyncOp
            tmo = opts
        else:  # allreduce(tensors | tensor, op=SUM, timeout=None)
            name, async_op, tmo = op_of(opts), True, timeout
        if type(tensors) is not list or len(tensors) != 1:
            tensors = as_list(tensors)
            if len(tensors) != 1:
                return self._allreduce_many(tensors, name, async_op, tmo)
        t = tensors[0]
        mtype, mop, compute, average = self._plan(t.dtype, name)
        if compute is None and not average and t.is_cpu and t.is_contiguous() and not t.is_conj():
            nbytes = t.nbytes
            if nbytes >= self._ring_min_bytes and self._size > 1 and t.dtype in RING_DTYPES:
                return self._run(
                    "all_reduce", None, t, tensors, None, async_op, steps=ring_allreduce(self, t, name), tmo=tmo
                )
            req = self._comm.Iallreduce(_IN_PLACE, [_fromaddress(t.data_ptr(), nbytes), t.numel(), mtype], mop)
            return self._run("all_reduce", req, t, tensors, None, async_op, tmo=tmo)
        buf, mtype, mop, finish = self._reduce_buffer(t, name)
        req = self._comm.Iallreduce(_IN_PLACE, typed_spec(buf, mtype), mop)
        return self._run("all_reduce", req, (t, buf), tensors, finish, async_op, tmo=tmo)

    def _allreduce_many(self, tensors: list, name: str, async_op: bool, tmo: Any) -> Any:
        """Several tensors: one flat buffer per dtype, one Iallreduce each."""
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for dtype, group in by_dtype.items():
            mtype, mop, compute, average = self._plan(dtype, name)
            flat = torch.cat([readable(t).reshape(-1) for t in group]).to(compute or dtype)
            reqs.append(self._comm.Iallreduce(_IN_PLACE, typed_spec(flat, mtype), mop))
            keep.append(flat)
            finishes.append((group, flat, average))

        def finish() -> None:
            for group, flat, average in finishes:
                if average:
                    flat.div_(self._size)
                offset = 0
                for t in group:
                    n = t.numel()
                    t.copy_(flat[offset : offset + n].view(t.shape))
                    offset += n

        return self._run("all_reduce_coalesced", reqs, (tensors, keep), tensors, finish, async_op, tmo=tmo)

    def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> Any:
        if self._outstanding or self._orphans or self._closed:
            self._check()
        name = op_of(opts.reduceOp) if opts is not None else "SUM"
        async_op = opts.asyncOp if opts is not None else True
        return self._allreduce_many(as_list(tensors), name, async_op, opts)

    # -- reduce --------------------------------------------------------------------------------
    def reduce(self, tensors: Any, opts: Any = None, op: Any = None, timeout: Any = None) -> Any:
        self._check()
        if isinstance(opts, dist.ReduceOptions):
            root, name, async_op, tmo = opts.rootRank, op_of(opts.reduceOp), opts.asyncOp, opts
        else:  # reduce(tensor, root, op=SUM, timeout=None)
            root, name, async_op, tmo = opts, op_of(op), True, timeout
        root = check_root(self, root, "reduce")
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        for t in as_list(tensors):
            buf, mtype, mop, finish = self._reduce_buffer(t, name)
            if self._rank == root:
                reqs.append(self._comm.Ireduce(_IN_PLACE, typed_spec(buf, mtype), mop, root))
                finishes.append(finish)
            else:
                reqs.append(self._comm.Ireduce(typed_spec(buf, mtype), None, mop, root))
            keep.append((t, buf))
        return self._run("reduce", reqs, keep, as_list(tensors), _chain(finishes), async_op, tmo=tmo, root=root)

    # -- broadcast -----------------------------------------------------------------------------
    def broadcast(self, tensors: Any, opts: Any = None, timeout: Any = None) -> Any:
        if self._outstanding or self._orphans or self._closed:
            self._check()
        if isinstance(opts, dist.BroadcastOptions):
            root, async_op, tmo = opts.rootRank, opts.asyncOp, opts
        else:  # broadcast(tensor, root, timeout=None)
            root, async_op, tmo = opts, True, timeout
        root = check_root(self, root, "broadcast")
        tensors = as_list(tensors)
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        for t in tensors:
            buf = readable(t) if self._rank == root else writable(t)
            reqs.append(self._comm.Ibcast(byte_spec(buf), root))
            keep.append((t, buf))
            if buf is not t and self._rank != root:
                finishes.append(_copier(t, buf))
        req = reqs[0] if len(reqs) == 1 else reqs
        return self._run("broadcast", req, keep, tensors, _chain(finishes), async_op, tmo=tmo, root=root)

    # -- reduce_scatter ------------------------------------------------------------------------
    def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any = None, timeout: Any = None) -> Any:
        self._check()
        if isinstance(opts, dist.ReduceScatterOptions):
            name, async_op, tmo = op_of(opts.reduceOp), opts.asyncOp, opts
        else:  # reduce_scatter(output, input_list, op=SUM, timeout=None)
            name, async_op, tmo = op_of(opts), True, timeout
        if isinstance(outputs, torch.Tensor):
            outputs, inputs = [outputs], [inputs]
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        for out, ins in zip(as_list(outputs), inputs, strict=True):
            if len(ins) != self._size:
                raise ValueError(
                    f"{self._who()}: reduce_scatter needs {self._size} input tensors (one per rank), got {len(ins)}"
                )
            flat = torch.cat([readable(t).reshape(-1) for t in ins])
            self._reduce_scatter_one(out, flat, name, reqs, keep, finishes)
        return self._run("reduce_scatter", reqs, keep, as_list(outputs), _chain(finishes), async_op, tmo=tmo)

    def _reduce_scatter_one(
        self, out: torch.Tensor, inp: torch.Tensor, name: str, reqs: list, keep: list, finishes: list
    ) -> None:
        if inp.numel() != out.numel() * self._size:
            raise ValueError(
                f"{self._who()}: reduce_scatter input has {inp.numel()} elements, "
                f"expected {self._size} x {out.numel()} (output)"
            )
        mtype, mop, compute, average = self._plan(out.dtype, name)
        send = readable(inp)
        if compute is not None:
            send = send.to(compute)
        recv = writable(out)
        if compute is not None or overlaps(recv, send):
            recv = torch.empty(out.shape, dtype=compute or out.dtype, device=send.device)
        block = [_fromaddress(send.data_ptr(), send.nbytes), recv.numel(), mtype]  # mpi4py counts per block
        reqs.append(self._comm.Ireduce_scatter_block(block, typed_spec(recv, mtype), mop))
        keep.append((out, inp, send, recv))
        finish = _finish_reduce(out, recv, average, self._size)
        if finish is not None:
            finishes.append(finish)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:  # noqa: A002
        self._check()
        name = op_of(opts.reduceOp) if opts is not None else "SUM"
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        self._reduce_scatter_one(output, input, name, reqs, keep, finishes)
        async_op = opts.asyncOp if opts is not None else True
        return self._run("reduce_scatter_tensor", reqs[0], keep, [output], _chain(finishes), async_op, tmo=opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        self._check()
        name = op_of(opts.reduceOp) if opts is not None else "SUM"
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        for out, inp in zip(as_list(outputs), as_list(inputs), strict=True):
            self._reduce_scatter_one(out, inp, name, reqs, keep, finishes)
        async_op = opts.asyncOp if opts is not None else True
        return self._run(
            "reduce_scatter_tensor_coalesced", reqs, keep, as_list(outputs), _chain(finishes), async_op, tmo=opts
        )

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- barrier -------------------------------------------------------------------------------
    def barrier(self, opts: Any = None, timeout: Any = None) -> Any:
        self._check()
        if isinstance(opts, dist.BarrierOptions):
            async_op, tmo = opts.asyncOp, opts
        else:  # barrier(timeout=None)
            async_op, tmo = True, timeout if timeout is not None else opts
        return self._run("barrier", self._comm.Ibarrier(), None, [], None, async_op, tmo=tmo)

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """A barrier that raises after `timeout` (the group's by default), naming this rank and group."""
        self.barrier(timeout=timeout).wait()


def _copier(target: torch.Tensor, staged: torch.Tensor) -> Any:
    return lambda: target.copy_(staged)


def _chain(finishes: list) -> Any:
    finishes = [f for f in finishes if f is not None]
    if not finishes:
        return None
    if len(finishes) == 1:
        return finishes[0]

    def finish() -> None:
        for f in finishes:
            f()

    return finish
