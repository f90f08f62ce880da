"""Point-to-point: send, recv (from a rank or any source) with tags, as MPI Isend/Irecv.

torch's send/isend/recv/irecv and batch_isend_irecv all come here; every call is non-blocking and
returns a Work (batch_isend_irecv issues them one after another, which cannot deadlock since none
blocks). A receive records its MPI status, so `recv(src=None)` reports the real source.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from mpi4py import MPI

from .base import GroupBase
from .buffers import byte_spec, readable, writable
from .options import as_list

__all__ = ["PointToPointOps"]


@functools.cache
def _tag_ub() -> int:
    """The largest tag MPI allows (read at first use, not at import)."""
    return MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767


class PointToPointOps(GroupBase):
    """send, recv and recv_anysource over an MPI communicator."""

    def _peer(self, rank: int, what: str) -> int:
        rank = int(rank)
        if not 0 <= rank < self._size:
            raise ValueError(f"{self._who()}: {what} rank {rank} is not a rank of {self._desc} (size {self._size})")
        return rank

    @staticmethod
    def _tag(tag: int) -> int:
        tag = int(tag)
        if not 0 <= tag <= _tag_ub():
            raise ValueError(f"tag {tag} is outside MPI's range 0..{_tag_ub()}")
        return tag

    def send(self, tensors: Any, dstRank: int, tag: int = 0) -> Any:  # noqa: N803 - torch's names
        self._check()
        dst, tag = self._peer(dstRank, "send destination"), self._tag(tag)
        tensors = as_list(tensors)
        if len(tensors) != 1:
            raise ValueError(f"{self._who()}: send takes exactly one tensor, got {len(tensors)}")
        buf = readable(tensors[0])
        req = self._comm.Isend(byte_spec(buf), dst, tag)
        name = f"send to group rank {dst} (tag {tag})"
        return self._run(name, req, (tensors, buf), tensors, None, True, peer=f"dst={self._ranks[dst]}")

    def recv(self, tensors: Any, srcRank: int, tag: int = 0) -> Any:  # noqa: N803
        self._check()
        src = self._peer(srcRank, "recv source")
        return self._recv(
            tensors, src, self._tag(tag), f"recv from group rank {src} (tag {tag})", str(self._ranks[src])
        )

    def recv_anysource(self, tensors: Any, tag: int = 0) -> Any:
        self._check()
        return self._recv(tensors, MPI.ANY_SOURCE, self._tag(tag), f"recv from any source (tag {tag})", "any")

    def _recv(self, tensors: Any, src: int, tag: int, name: str, source: str) -> Any:
        tensors = as_list(tensors)
        if len(tensors) != 1:
            raise ValueError(f"{self._who()}: recv takes exactly one tensor, got {len(tensors)}")
        out = tensors[0]
        buf = writable(out)
        status = MPI.Status()
        req = self._comm.Irecv(byte_spec(buf), src, tag)
        finish = _received(out, buf, status)
        return self._run(name, req, (tensors, buf), tensors, finish, True, status=status, peer=f"src={source}")


def _received(out: torch.Tensor, buf: torch.Tensor, status: MPI.Status) -> Any:
    """Check the message filled the tensor (MPI only rejects longer ones), then copy back if staged."""

    def finish() -> None:
        got = status.Get_count(MPI.BYTE)
        if got != buf.nbytes:
            raise ValueError(
                f"received {got} bytes from group rank {status.Get_source()} but the tensor holds {buf.nbytes}"
            )
        if buf is not out:
            out.copy_(buf)

    return finish
