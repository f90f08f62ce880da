"""How each torch dtype and ReduceOp maps onto an MPI reduction (pure: names only, no MPI calls).

Data movement (broadcast, gathers, scatters, all-to-all, send/recv) ships raw bytes, so every dtype
works there. Reductions need a typed MPI operation; `reduction_plan` says which, and when the dtype
has no MPI counterpart (float16, bfloat16, the float8 family, complex32) it names a wider dtype to
reduce in. MPI has no bfloat16: reducing its bytes as another type gives wrong sums silently, so
those tensors are upcast to float32, reduced once, and rounded back once (more exact than gloo,
which rounds after every partial sum).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

__all__ = ["OP_NAMES", "Plan", "op_name", "reduction_plan"]

#: ReduceOp.RedOpType values, by their integer code (SUM=0 … PREMUL_SUM=8).
OP_NAMES = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM")

_NATIVE = {
    torch.float32: "FLOAT",
    torch.float64: "DOUBLE",
    torch.int8: "INT8_T",
    torch.int16: "INT16_T",
    torch.int32: "INT32_T",
    torch.int64: "INT64_T",
    torch.uint8: "UINT8_T",
    torch.uint16: "UINT16_T",
    torch.uint32: "UINT32_T",
    torch.uint64: "UINT64_T",
    torch.complex64: "C_FLOAT_COMPLEX",
    torch.complex128: "C_DOUBLE_COMPLEX",
    torch.bool: "C_BOOL",
}
_FLOAT8 = tuple(getattr(torch, n) for n in dir(torch) if n.startswith("float8_"))
_UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}
_UPCAST.update((d, torch.float32) for d in _FLOAT8)

_MPI_OP = {
    "SUM": "SUM",
    "AVG": "SUM",
    "PRODUCT": "PROD",
    "MIN": "MIN",
    "MAX": "MAX",
    "BAND": "BAND",
    "BOR": "BOR",
    "BXOR": "BXOR",
}
# gloo's semantics on bool: + and max are "or", * and min are "and", ^ is "xor".
_BOOL_OP = {"SUM": "LOR", "MAX": "LOR", "BOR": "LOR", "PRODUCT": "LAND", "MIN": "LAND", "BAND": "LAND", "BXOR": "LXOR"}


class Plan(NamedTuple):
    """An MPI reduction: datatype and op names, the dtype to reduce in (None: in place), and AVG."""

    mpi_type: str
    mpi_op: str
    compute: torch.dtype | None
    average: bool


def op_name(op: Any) -> str:
    """The name of a ReduceOp, a ReduceOp.RedOpType, or a name string ("SUM")."""
    if isinstance(op, str):
        name = op.upper()
    else:
        op = getattr(op, "op", op)  # ReduceOp -> RedOpType
        name = OP_NAMES[int(op)] if int(op) < len(OP_NAMES) else str(op)
    if name not in OP_NAMES:
        raise ValueError(f"unknown reduce op {op!r}")
    return name


def reduction_plan(dtype: torch.dtype, op: str) -> Plan:
    """How to reduce `dtype` with `op`, or a TypeError/ValueError that says why it cannot be done."""
    if op == "PREMUL_SUM":
        raise ValueError(
            "ReduceOp.PREMUL_SUM is not supported by the mpi4py backend (nor by gloo); scale the tensor and use SUM"
        )
    if op not in _MPI_OP:
        raise ValueError(f"unknown reduce op {op!r}")
    compute = _UPCAST.get(dtype)
    reduce_dtype = compute or dtype
    if reduce_dtype not in _NATIVE:
        raise TypeError(f"the mpi4py backend cannot reduce tensors of dtype {dtype}")
    integral = not (reduce_dtype.is_floating_point or reduce_dtype.is_complex)
    if op in ("BAND", "BOR", "BXOR") and not integral:
        raise TypeError(f"Cannot use ReduceOp.{op} with non-integral dtype {dtype}")
    if op in ("MIN", "MAX") and reduce_dtype.is_complex:
        raise TypeError(f"Cannot use ReduceOp.{op} with complex dtype {dtype}: complex numbers are not ordered")
    if op == "AVG" and integral:
        raise TypeError(
            f"Cannot use ReduceOp.AVG with dtype {dtype}: the mean of integers is not an integer "
            "(gloo fails the same way); reduce with SUM and divide, or use a floating dtype"
        )
    if dtype == torch.bool:
        return Plan("C_BOOL", _BOOL_OP[op], None, False)
    return Plan(_NATIVE[reduce_dtype], _MPI_OP[op], compute, op == "AVG")
