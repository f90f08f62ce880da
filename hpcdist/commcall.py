"""One communication call, as hpcdist records it, from the mpi backend's ring to the trace file (a leaf: pure).

`Call` is the one type every recorder makes and every reader takes: the compiled mpi backend's ring exports its
calls as Calls (csrc/native.cpp makes each by its fields' names), the
Python group and the dist.* ledger record into Calls, a rank's answer to the hang report sends them, the divergence
analysis reads them, and the trace file is written from them and read back into them.

Its times are seconds on one clock, which its holder knows: as recorded, CLOCK_MONOTONIC of the rank that made the
call; in a rank's answer to the hang report, relative to the moment it answered (`age`); in a trace, the trace's
aligned clock (`moved`).
"""

from __future__ import annotations

import time
from typing import Any

from .records import fields, record

__all__ = ["FIELDS", "Call", "dtype_name"]

_monotonic = time.monotonic
# c10's names of dtypes (the compiled mpi backend's and Flight Recorder's) as torch spells them
_C10_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Byte": "uint8",
    "Char": "int8",
    "Short": "int16",
    "Int": "int32",
    "Long": "int64",
    "Bool": "bool",
}


@record(slots=True)
class Call:
    """One communication call: operation, peer or root, first tensor's shape and dtype, group, times, completion."""

    op: str  # torch.distributed's name: "all_reduce", "send", ...
    peer: str  # "src=0", "dst=2", "root=0" or ""
    shape: tuple[int, ...]
    dtype: Any  # its name as torch spells it ("float32"); as recorded, maybe the torch.dtype itself (`copy` names it)
    group: str  # "world", or a subgroup's global ranks: "[0, 1]"
    gseq: int  # the how-many-th collective on its group (0 for point-to-point): aligns ranks' ledgers
    started: float
    ended: float | None = None  # None while it runs, or when its end is not known
    done: bool = False
    backward: bool = False  # issued while autograd ran a backward pass (DDP's gradient all-reduce)
    seq: int = 0  # the how-many-th call of its rank (0 until numbered: a backend's ring does not number them)

    def __reduce__(self) -> tuple[type[Call], tuple[Any, ...]]:
        """Pickled as its fields alone (what mpi4py sends between ranks)."""
        return (Call, (self.op, self.peer, self.shape, self.dtype, self.group, self.gseq, self.started, self.ended,
                       self.done, self.backward, self.seq))  # fmt: skip

    def finish(self) -> None:
        """Mark the call finished, now (every recorder ends a call through this)."""
        self.ended, self.done = _monotonic(), True

    def copy(self) -> Call:
        """A copy as it leaves its recorder: the shape a tuple, the dtype named as torch spells it (`dtype_name`)."""
        return Call(self.op, self.peer, tuple(self.shape), dtype_name(self.dtype), self.group, self.gseq,
                    self.started, self.ended, self.done, self.backward, self.seq)  # fmt: skip

    def moved(self, by: float) -> Call:
        """A copy on another clock: its times plus `by` seconds (an end not known stays None)."""
        ended = None if self.ended is None else self.ended + by
        return Call(self.op, self.peer, self.shape, self.dtype, self.group, self.gseq, self.started + by, ended,
                    self.done, self.backward, self.seq)  # fmt: skip

    @property
    def age(self) -> float:
        """Seconds from its start to its clock's zero: in a rank's answer, how long before the answer it started."""
        return -self.started

    @property
    def note(self) -> str:
        """Who issued a call that no dist.* call made, when known ("" otherwise)."""
        if not self.backward:
            return ""
        if self.op == "all_reduce":
            return "issued by autograd's backward pass: DDP's gradient all-reduce"
        return "issued by autograd's backward pass"

    def label(self) -> str:
        """`recv(src=0) #17`, as the hang report names a call."""
        return f"{self.op}({self.peer}) #{self.seq}" if self.peer else f"{self.op} #{self.seq}"

    def waiting(self) -> str:
        """The label, and who issued the call when known: what a rank waits in."""
        note = self.note
        return f"{self.label()} ({note})" if note else self.label()

    def signature(self) -> tuple[str, str, tuple[int, ...], str, str]:
        """What must match across ranks for a collective: operation, root, shape, dtype, group."""
        return (self.op, self.peer, tuple(self.shape), str(self.dtype), self.group)


FIELDS = tuple(field.name for field in fields(Call))


def dtype_name(dtype: object) -> str:
    """`float32` for torch.float32, for c10's `Float`, or for the name itself."""
    name = str(dtype).removeprefix("torch.")
    return _C10_DTYPES.get(name, name)
