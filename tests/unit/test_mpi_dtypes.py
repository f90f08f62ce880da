"""Which MPI datatype/op reduces each torch dtype and ReduceOp: a pure table, no MPI involved."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from hpcdist.mpi_backend.dtypes import OP_NAMES, Plan, op_name, reduction_plan


@pytest.mark.parametrize(
    ("dtype", "op", "plan"),
    [
        (torch.float32, "SUM", Plan("FLOAT", "SUM", None, False)),
        (torch.float64, "AVG", Plan("DOUBLE", "SUM", None, True)),
        (torch.int64, "BXOR", Plan("INT64_T", "BXOR", None, False)),
        (torch.uint8, "PRODUCT", Plan("UINT8_T", "PROD", None, False)),
        (torch.uint32, "MAX", Plan("UINT32_T", "MAX", None, False)),
        (torch.bfloat16, "SUM", Plan("FLOAT", "SUM", torch.float32, False)),  # MPI has no bfloat16
        (torch.float16, "AVG", Plan("FLOAT", "SUM", torch.float32, True)),
        (torch.float8_e4m3fn, "MAX", Plan("FLOAT", "MAX", torch.float32, False)),
        (torch.complex64, "SUM", Plan("C_FLOAT_COMPLEX", "SUM", None, False)),
        (torch.complex32, "AVG", Plan("C_FLOAT_COMPLEX", "SUM", torch.complex64, True)),
        (torch.bool, "SUM", Plan("C_BOOL", "LOR", None, False)),  # gloo: True + True is True
        (torch.bool, "MIN", Plan("C_BOOL", "LAND", None, False)),
        (torch.bool, "PRODUCT", Plan("C_BOOL", "LAND", None, False)),
        (torch.bool, "BXOR", Plan("C_BOOL", "LXOR", None, False)),
    ],
)
def test_reduction_plan(dtype: torch.dtype, op: str, plan: Plan) -> None:
    assert reduction_plan(dtype, op) == plan


@pytest.mark.parametrize(
    ("dtype", "op", "error", "message"),
    [
        (torch.int32, "AVG", TypeError, "ReduceOp.AVG with dtype torch.int32"),
        (torch.bool, "AVG", TypeError, "ReduceOp.AVG with dtype torch.bool"),
        (torch.float32, "BAND", TypeError, "ReduceOp.BAND with non-integral dtype torch.float32"),
        (torch.bfloat16, "BOR", TypeError, "non-integral"),
        (torch.complex64, "MAX", TypeError, "complex numbers are not ordered"),
        (torch.float32, "PREMUL_SUM", ValueError, "PREMUL_SUM is not supported"),
    ],
)
def test_reduction_plan_rejects_clearly(dtype: torch.dtype, op: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        reduction_plan(dtype, op)


def test_every_torch_dtype_has_a_sum_or_a_clear_refusal() -> None:
    dtypes = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    for dtype in dtypes:
        try:
            plan = reduction_plan(dtype, "SUM")
        except TypeError as exc:
            assert str(dtype) in str(exc)
        else:
            assert plan.compute is None or plan.compute.itemsize >= dtype.itemsize


def test_op_names_follow_torch() -> None:
    for name in OP_NAMES:
        assert op_name(getattr(dist.ReduceOp, name)) == name
        assert op_name(dist.ReduceOp(getattr(dist.ReduceOp, name))) == name if name != "PREMUL_SUM" else True
    assert op_name("max") == "MAX"
