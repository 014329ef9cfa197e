"""NCCL dtype and reduction-op maps, and the errors for what NCCL cannot compute."""
from __future__ import annotations

import numpy as np
import pytest

import aluminum as al
from aluminum.backends.nccl.datatypes import (BYTES, DATATYPES, NATIVE_OPS, NcclDataType,
                                              NcclRedOp, ReductionPlan, nccl_datatype,
                                              reduction_plan)
from nccl_fakes import fake_nccl_communicator
from providers import FakeCudaArray


def cupy_nccl():
    """``cupy.cuda.nccl`` with its constants, or skip (needs cupy and the NCCL library,
    not a GPU)."""
    nccl = pytest.importorskip("cupy.cuda.nccl", reason="cupy is not installed")
    if not nccl.available:
        pytest.skip("cupy.cuda.nccl has no NCCL library (pip install nvidia-nccl-cu13)")
    return nccl


@pytest.mark.parametrize("member", list(NcclDataType), ids=lambda m: m.name)
def test_datatype_enum_matches_cupy(member):
    assert getattr(cupy_nccl(), f"NCCL_{member.name}") == member


@pytest.mark.parametrize("member", list(NcclRedOp), ids=lambda m: m.name)
def test_reduction_op_enum_matches_cupy(member):
    assert getattr(cupy_nccl(), f"NCCL_{member.name}") == member


@pytest.mark.parametrize("dtype, expected", [
    (np.int8, "INT8"), (np.uint8, "UINT8"), (np.int32, "INT32"), (np.uint32, "UINT32"),
    (np.int64, "INT64"), (np.uint64, "UINT64"), (np.float16, "FLOAT16"),
    (np.float32, "FLOAT32"), (np.float64, "FLOAT64"), (al.bfloat16, "BFLOAT16"),
    (np.bool_, "UINT8"),
])
def test_dtype_map(dtype, expected):
    assert nccl_datatype(np.dtype(dtype)) is NcclDataType[expected]
    assert DATATYPES[np.dtype(dtype)] is NcclDataType[expected]


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.longdouble])
def test_dtypes_without_an_nccl_type_name_the_argument(dtype):
    with pytest.raises(al.UnsupportedError, match=rf"recvbuf: the nccl backend cannot reduce "
                                                  rf"{np.dtype(dtype)}"):
        nccl_datatype(np.dtype(dtype), "recvbuf")


@pytest.mark.parametrize("op", [al.SUM, al.PROD, al.MIN, al.MAX, al.AVG])
@pytest.mark.parametrize("dtype", [np.int32, np.float16, al.bfloat16, np.float64])
def test_native_ops(op, dtype):
    plan = reduction_plan(op, np.dtype(dtype))
    assert plan == ReductionPlan(DATATYPES[np.dtype(dtype)], NATIVE_OPS[op])
    assert plan.op is NcclRedOp[op.name]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint64, np.bool_])
@pytest.mark.parametrize("op, nccl_op, parity", [
    (al.LOR, NcclRedOp.MAX, False), (al.LAND, NcclRedOp.MIN, False),
    (al.LXOR, NcclRedOp.SUM, True)])
def test_logical_ops_reduce_bytes(dtype, op, nccl_op, parity):
    assert reduction_plan(op, np.dtype(dtype)) == ReductionPlan(NcclDataType.UINT8, nccl_op,
                                                                logical=True, parity=parity)


@pytest.mark.parametrize("bitwise, logical", [(al.BOR, al.LOR), (al.BAND, al.LAND),
                                              (al.BXOR, al.LXOR)])
def test_bitwise_ops_on_bool_are_the_logical_ones(bitwise, logical):
    boolean = np.dtype(np.bool_)
    assert reduction_plan(bitwise, boolean) == reduction_plan(logical, boolean)


@pytest.mark.parametrize("op", [al.BOR, al.BAND, al.BXOR])
def test_bitwise_ops_on_integers_are_unsupported_naming_op(op):
    with pytest.raises(al.UnsupportedError, match=rf"op: {op.name} on int32 is not supported "
                                                  rf"by the nccl backend"):
        reduction_plan(op, np.dtype(np.int32))


def test_int16_arithmetic_is_unsupported_naming_the_buffer():
    with pytest.raises(al.UnsupportedError, match="buf: the nccl backend cannot reduce int16"):
        reduction_plan(al.SUM, np.dtype(np.int16))


def test_bytes_are_uint8():
    assert BYTES is NcclDataType.UINT8


@pytest.mark.parametrize("dtype, op, match", [
    (np.int16, al.SUM, "buf: the nccl backend cannot reduce int16"),
    (np.uint16, al.MAX, "buf: the nccl backend cannot reduce uint16"),
    (np.int64, al.BAND, "op: BAND on int64 is not supported by the nccl backend"),
])
@pytest.mark.parametrize("blocking", [True, False])
def test_unsupported_calls_are_rejected_before_any_nccl_call(monkeypatch, dtype, op, match,
                                                             blocking):
    with fake_nccl_communicator(monkeypatch) as (comm, fake):
        values = np.arange(4).astype(dtype)
        buf = values.copy()
        call = al.allreduce if blocking else al.nonblocking_allreduce
        with pytest.raises(al.UnsupportedError, match=match):
            call(FakeCudaArray(buf), comm, op=op)
        comm.stream.synchronize()
        assert fake.calls == []
        np.testing.assert_array_equal(buf, values)
        al.allreduce(FakeCudaArray(np.zeros(2, np.float32)), comm)   # still usable
        comm.stream.synchronize()
