"""Operations that only move bytes: all_gather, gather, scatter, all_to_all, in every torch call form.

Everything travels as MPI.BYTE, so every dtype works (bfloat16, bool, complex32, float8, …). A list
of output tensors that are consecutive views of one buffer (as torch's object collectives make) is
received into directly; any other list goes through one contiguous staging buffer.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import torch
import torch.distributed as dist
from mpi4py import MPI

from .base import GroupBase
from .buffers import byte_spec, raw, readable, writable
from .collectives import _chain
from .options import as_list, check_root, overlaps

__all__ = ["DataMovementOps"]

_IN_PLACE = MPI.IN_PLACE
_BYTE = MPI.BYTE


def _consecutive(tensors: list[torch.Tensor]) -> bool:
    """True if the tensors are contiguous host tensors laid out one after another in memory."""
    if not tensors or not all(t.is_cpu and t.is_contiguous() for t in tensors):
        return False
    ptr = tensors[0].data_ptr()
    for t in tensors:
        if t.data_ptr() != ptr or t.dtype != tensors[0].dtype:
            return False
        ptr += t.nbytes
    return True


def _region(tensors: list[torch.Tensor]) -> Any:
    """One MPI buffer spanning consecutive tensors."""
    return [MPI.buffer.fromaddress(tensors[0].data_ptr(), sum(t.nbytes for t in tensors)), _BYTE]


def _gathered_into(outs: list[torch.Tensor], nbytes: int) -> tuple:
    """(receive spec, staging tensor or None, finish) for receiving one block per output tensor."""
    if _consecutive(outs):
        return _region(outs), None, None
    flat = torch.empty(nbytes * len(outs), dtype=torch.uint8)

    def finish() -> None:
        for i, o in enumerate(outs):
            o.copy_(flat[i * nbytes : (i + 1) * nbytes].view(o.dtype).view(o.shape))

    return byte_spec(flat), flat, finish


def _check_blocks(group: Any, what: str, tensors: list[torch.Tensor], like: torch.Tensor) -> None:
    if len(tensors) != group._size:
        raise ValueError(
            f"{group._who()}: {what} needs {group._size} tensors (one per rank of {group._desc}), got {len(tensors)}"
        )
    for t in tensors:
        if t.nbytes != like.nbytes or t.dtype != like.dtype:
            raise ValueError(
                f"{group._who()}: {what} tensors must all match the input ({like.dtype}, {like.numel()} elements), "
                f"got {t.dtype}, {t.numel()}"
            )


def _check_coalesced(group: Any, output_lists: list, inputs: list[torch.Tensor]) -> None:
    """Raise ValueError unless output_lists holds, for each rank, one tensor like each input (gloo's checks)."""
    if not inputs:
        raise ValueError(f"{group._who()}: all_gather_coalesced needs at least one input tensor")
    if len(output_lists) != group._size:
        raise ValueError(
            f"{group._who()}: all_gather_coalesced needs {group._size} output lists (one per rank of "
            f"{group._desc}), got {len(output_lists)}"
        )
    for r, outs in enumerate(output_lists):
        if len(outs) != len(inputs):
            raise ValueError(
                f"{group._who()}: all_gather_coalesced output list {r} has {len(outs)} tensors, "
                f"one per input needs {len(inputs)}"
            )
        for i, (o, t) in enumerate(zip(outs, inputs, strict=True)):
            if o.shape != t.shape or o.dtype != t.dtype:
                raise ValueError(
                    f"{group._who()}: all_gather_coalesced output [{r}][{i}] must match input {i} "
                    f"({t.dtype}, shape {list(t.shape)}), got {o.dtype}, shape {list(o.shape)}"
                )


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return readable(t).reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


class DataMovementOps(GroupBase):
    """all_gather, gather, scatter and all_to_all over an MPI communicator."""

    # -- all_gather ----------------------------------------------------------------------------
    def allgather(self, outputs: Any, inputs: Any, opts: Any = None, timeout: Any = None) -> Any:
        self._check()
        if isinstance(inputs, torch.Tensor):  # allgather(output_list, input_tensor, timeout=None)
            outputs, inputs, opts, timeout = [outputs], [inputs], None, timeout if timeout is not None else opts
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        for outs, inp in zip(outputs, as_list(inputs), strict=True):
            _check_blocks(self, "all_gather", outs, inp)
            send = readable(inp)
            recv, staging, finish = _gathered_into(outs, inp.nbytes)
            if staging is None and send.data_ptr() == outs[self._rank].data_ptr() and inp.nbytes:
                send_spec: Any = _IN_PLACE  # the input already sits in this rank's output slot
            else:
                send_spec = byte_spec(send)
            reqs.append(self._comm.Iallgather(send_spec, recv))
            keep.append((outs, inp, send, staging))
            finishes.append(finish)
        return self._run(
            "all_gather",
            reqs,
            keep,
            [t for outs in outputs for t in outs],
            _chain(finishes),
            _async(opts),
            tmo=opts or timeout,
        )

    def allgather_coalesced(self, output_lists: Any, inputs: Any, opts: Any = None) -> Any:
        """torch's all_gather_coalesced: output_lists[r][i] receives rank r's inputs[i], in one MPI call."""
        self._check()
        ins = as_list(inputs)
        _check_coalesced(self, output_lists, ins)
        send = torch.cat([_as_bytes(t) for t in ins])  # this rank's block: its inputs one after another
        offsets = [0, *accumulate(t.nbytes for t in ins)]
        recv = torch.empty(send.nbytes * self._size, dtype=torch.uint8)

        def finish() -> None:
            for r, outs in enumerate(output_lists):
                block = recv[r * send.nbytes : (r + 1) * send.nbytes]
                for o, start, end in zip(outs, offsets, offsets[1:], strict=False):
                    o.copy_(block[start:end].view(o.dtype).view(o.shape))

        req = self._comm.Iallgather(byte_spec(send), byte_spec(recv))
        result = [t for outs in output_lists for t in outs]
        return self._run(
            "all_gather_coalesced", req, (output_lists, ins, send, recv), result, finish, _async(opts), tmo=opts
        )

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:  # noqa: A002
        self._check()
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        self._gather_single(output, input, reqs, keep, finishes)
        return self._run("all_gather_into_tensor", reqs[0], keep, [output], _chain(finishes), _async(opts), tmo=opts)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        self._check()
        reqs: list[Any] = []
        keep: list[Any] = []
        finishes: list[Any] = []
        for out, inp in zip(as_list(outputs), as_list(inputs), strict=True):
            self._gather_single(out, inp, reqs, keep, finishes)
        return self._run(
            "all_gather_into_tensor_coalesced", reqs, keep, as_list(outputs), _chain(finishes), _async(opts), tmo=opts
        )

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _gather_single(self, out: torch.Tensor, inp: torch.Tensor, reqs: list, keep: list, finishes: list) -> None:
        if out.nbytes != inp.nbytes * self._size or out.dtype != inp.dtype:
            raise ValueError(
                f"{self._who()}: all_gather_into_tensor output must hold {self._size} x {inp.numel()} {inp.dtype} "
                f"elements, got {out.numel()} {out.dtype}"
            )
        recv = writable(out)
        send = readable(inp)
        if recv is out and send.nbytes and send.data_ptr() == out.data_ptr() + self._rank * inp.nbytes:
            send_spec: Any = _IN_PLACE
        else:
            if overlaps(send, recv):
                send = send.clone()
            send_spec = byte_spec(send)
        reqs.append(self._comm.Iallgather(send_spec, byte_spec(recv)))
        keep.append((out, inp, send, recv))
        finishes.append(None if recv is out else (lambda: out.copy_(recv)))

    # -- gather / scatter ----------------------------------------------------------------------
    def gather(self, outputs: Any, inputs: Any, opts: Any = None, timeout: Any = None) -> Any:
        self._check()
        if isinstance(opts, dist.GatherOptions):
            root, tmo = opts.rootRank, opts
        else:  # gather(output_list, input_tensor, root, timeout=None)
            root, tmo, opts = opts, timeout, None
            outputs, inputs = ([outputs] if outputs else []), [inputs]
        root = check_root(self, root, "gather")
        inp = as_list(inputs)[0]
        send = readable(inp)
        finish = staging = None
        if self._rank == root:
            outs = outputs[0]
            _check_blocks(self, "gather", outs, inp)
            recv, staging, finish = _gathered_into(outs, inp.nbytes)
            if staging is None and send.data_ptr() == outs[root].data_ptr() and inp.nbytes:
                send_spec: Any = _IN_PLACE
            else:
                send_spec = byte_spec(send)
            req = self._comm.Igather(send_spec, recv, root)
        else:
            req = self._comm.Igather(byte_spec(send), None, root)
        result = [t for outs in outputs for t in outs]
        return self._run("gather", req, (outputs, inp, send, staging), result, finish, _async(opts), tmo=tmo, root=root)

    def scatter(self, outputs: Any, inputs: Any, opts: Any = None, timeout: Any = None) -> Any:
        self._check()
        if isinstance(opts, dist.ScatterOptions):
            root, tmo = opts.rootRank, opts
        else:  # scatter(output_tensor, input_list, root, timeout=None)
            root, tmo, opts = opts, timeout, None
            outputs, inputs = [outputs], ([inputs] if inputs else [])
        root = check_root(self, root, "scatter")
        out = as_list(outputs)[0]
        recv = writable(out)
        send = None
        if self._rank == root:
            ins = inputs[0]
            _check_blocks(self, "scatter", ins, out)
            if _consecutive(ins):
                send_spec, send = _region(ins), ins
            else:
                send = torch.cat([_as_bytes(t) for t in ins])
                send_spec = byte_spec(send)
            if recv is out and overlaps(recv, ins[0] if send is ins else send):
                recv = torch.empty_like(out, device="cpu")
            req = self._comm.Iscatter(send_spec, byte_spec(recv), root)
        else:
            req = self._comm.Iscatter(None, byte_spec(recv), root)
        finish = None if recv is out else (lambda: out.copy_(recv))
        return self._run("scatter", req, (inputs, out, send, recv), [out], finish, _async(opts), tmo=tmo, root=root)

    # -- all_to_all ----------------------------------------------------------------------------
    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002 - torch's parameter name
        output_split_sizes: Any = None,
        input_split_sizes: Any = None,
        opts: Any = None,
    ) -> Any:
        self._check()
        send, recv = readable(input), writable(output)
        if overlaps(send, recv):
            recv = torch.empty_like(output, device="cpu")
        out_splits, in_splits = list(output_split_sizes or []), list(input_split_sizes or [])
        if not out_splits and not in_splits:
            if input.nbytes % self._size or output.nbytes != input.nbytes:
                raise ValueError(
                    f"{self._who()}: all_to_all_single without splits needs equal input and output sizes "
                    f"divisible by {self._size}"
                )
            req = self._comm.Ialltoall(byte_spec(send), byte_spec(recv))
        else:
            req = self._comm.Ialltoallv(self._vspec(send, in_splits, "input"), self._vspec(recv, out_splits, "output"))
        finish = None if recv is output else (lambda: output.copy_(recv))
        return self._run(
            "all_to_all_single", req, (output, input, send, recv), [output], finish, _async(opts), tmo=opts
        )

    alltoall_base = all_to_all_single

    def _vspec(self, t: torch.Tensor, splits: list[int], what: str) -> list:
        """[buffer, (byte counts, byte displacements), BYTE] for splits along dimension 0."""
        rows = t.shape[0] if t.dim() else 1
        if not splits:
            if rows % self._size:
                raise ValueError(
                    f"{self._who()}: all_to_all_single {what} dimension 0 ({rows}) is not divisible by {self._size}"
                )
            splits = [rows // self._size] * self._size
        if len(splits) != self._size or sum(splits) != rows:
            raise ValueError(
                f"{self._who()}: all_to_all_single {what} splits {splits} must have {self._size} entries "
                f"summing to {rows}"
            )
        row_bytes = t.nbytes // rows if rows else 0
        counts = [s * row_bytes for s in splits]
        return [raw(t), (counts, [0, *accumulate(counts)][:-1]), _BYTE]

    def alltoall(self, outputs: Any, inputs: Any, opts: Any = None, timeout: Any = None) -> Any:
        self._check()
        outs, ins = as_list(outputs), as_list(inputs)
        if len(outs) != self._size or len(ins) != self._size:
            raise ValueError(
                f"{self._who()}: all_to_all needs {self._size} input and output tensors, got {len(ins)} and {len(outs)}"
            )
        send = torch.cat([_as_bytes(t) for t in ins])
        scounts = [t.nbytes for t in ins]
        rcounts = [t.nbytes for t in outs]
        recv = torch.empty(sum(rcounts), dtype=torch.uint8)
        req = self._comm.Ialltoallv(
            [raw(send), (scounts, [0, *accumulate(scounts)][:-1]), _BYTE],
            [raw(recv), (rcounts, [0, *accumulate(rcounts)][:-1]), _BYTE],
        )
        offsets = [0, *accumulate(rcounts)]

        def finish() -> None:
            for i, o in enumerate(outs):
                o.copy_(recv[offsets[i] : offsets[i + 1]].view(o.dtype).view(o.shape))

        tmo = opts if isinstance(opts, dist.AllToAllOptions) else timeout if timeout is not None else opts
        return self._run("all_to_all", req, (outs, ins, send, recv), outs, finish, _async(opts), tmo=tmo)


def _async(opts: Any) -> bool:
    """Options objects say whether the caller waits; the bare overloads are asynchronous."""
    return opts.asyncOp if opts is not None and hasattr(opts, "asyncOp") else True
