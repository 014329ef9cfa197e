"""What NCCL can compute: numpy dtypes and aluminum reduction ops mapped to NCCL's enums.

The enum values are NCCL's ABI (``nccl.h``: ``ncclDataType_t``, ``ncclRedOp_t``), so the maps
need neither cupy nor a GPU; tests check them against ``cupy.cuda.nccl``'s constants.

Data movement (broadcast, gathers, scatters, all-to-all, point-to-point) ships bytes as
``UINT8``, so every dtype aluminum accepts moves.  Reductions need an NCCL type:

- int16 and uint16 (and long double) have none: ``al.UnsupportedError`` for SUM, PROD,
  MIN, MAX and AVG; cast to int32, or use ``al.HostTransferCommunicator``.
- bool reduces as ``UINT8`` (numpy stores False/True as 0/1).
- SUM, PROD, MIN, MAX and AVG are native.  NCCL has no logical or bitwise reductions, so the
  logical ops are emulated on 0/1 bytes: every input element becomes ``x != 0`` in a uint8
  scratch buffer, LOR reduces it with MAX, LAND with MIN, LXOR with SUM followed by ``& 1``
  (a wrapped uint8 sum keeps its parity), and the 0/1 result is cast back into the output.
  That works for every integer dtype, int16 included.  On bool buffers BOR/BAND/BXOR are the
  logical ops, so they are emulated the same way; on integers they are ``al.UnsupportedError``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ...core.dtypes import bfloat16, describe
from ...core.errors import UnsupportedError
from ...core.reduction import ReductionOp


class NcclDataType(enum.IntEnum):
    """``ncclDataType_t``."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9


class NcclRedOp(enum.IntEnum):
    """``ncclRedOp_t`` (the built-in operators; AVG needs NCCL >= 2.10)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


DATATYPES: dict[np.dtype, NcclDataType] = {
    np.dtype(np.int8): NcclDataType.INT8,
    np.dtype(np.uint8): NcclDataType.UINT8,
    np.dtype(np.bool_): NcclDataType.UINT8,
    np.dtype(np.int32): NcclDataType.INT32,
    np.dtype(np.uint32): NcclDataType.UINT32,
    np.dtype(np.int64): NcclDataType.INT64,
    np.dtype(np.uint64): NcclDataType.UINT64,
    np.dtype(np.float16): NcclDataType.FLOAT16,
    np.dtype(np.float32): NcclDataType.FLOAT32,
    np.dtype(np.float64): NcclDataType.FLOAT64,
    bfloat16: NcclDataType.BFLOAT16,
}

NATIVE_OPS: dict[ReductionOp, NcclRedOp] = {
    ReductionOp.SUM: NcclRedOp.SUM,
    ReductionOp.PROD: NcclRedOp.PROD,
    ReductionOp.MAX: NcclRedOp.MAX,
    ReductionOp.MIN: NcclRedOp.MIN,
    ReductionOp.AVG: NcclRedOp.AVG,
}

# Logical ops on 0/1 bytes: the NCCL op and whether only the parity of the result counts.
_LOGICAL_OPS: dict[ReductionOp, tuple[NcclRedOp, bool]] = {
    ReductionOp.LOR: (NcclRedOp.MAX, False),
    ReductionOp.LAND: (NcclRedOp.MIN, False),
    ReductionOp.LXOR: (NcclRedOp.SUM, True),
}
_BOOL_BITWISE = {ReductionOp.BOR: ReductionOp.LOR, ReductionOp.BAND: ReductionOp.LAND,
                 ReductionOp.BXOR: ReductionOp.LXOR}

# Bytes are what data-movement operations ship.
BYTES = NcclDataType.UINT8


def nccl_datatype(dtype: np.dtype, name: str = "buf") -> NcclDataType:
    """The NCCL type that reduces ``dtype``; ``UnsupportedError`` naming ``name`` if none."""
    found = DATATYPES.get(np.dtype(dtype))
    if found is None:
        raise UnsupportedError(
            f"{name}: the nccl backend cannot reduce {describe(np.dtype(dtype))} (NCCL "
            f"reduces int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32 "
            f"and float64); cast it, or use al.HostTransferCommunicator")
    return found


@dataclass(frozen=True, slots=True)
class ReductionPlan:
    """How NCCL computes one aluminum reduction.

    ``logical``: inputs are turned into 0/1 bytes and reduced as ``UINT8`` with ``op``; the
    result is cast back to the buffer's dtype, keeping only its lowest bit when ``parity``.
    Otherwise ``datatype`` and ``op`` reduce the buffer as it is.
    """

    datatype: NcclDataType
    op: NcclRedOp
    logical: bool = False
    parity: bool = False


# (op, dtype) -> plan: every NCCL reduction asks, and building one costs a small call's worth.
_PLANS: dict[tuple[ReductionOp, np.dtype], ReductionPlan] = {}


def reduction_plan(op: ReductionOp, dtype: np.dtype, name: str = "buf") -> ReductionPlan:
    """Plan ``op`` on ``dtype`` (already validated by ``check_op_for_dtype``) for NCCL."""
    plan = _PLANS.get((op, dtype))
    if plan is None:
        plan = _PLANS[op, dtype] = _plan(op, np.dtype(dtype), name)
    return plan


def _plan(op: ReductionOp, dtype: np.dtype, name: str) -> ReductionPlan:
    if dtype == np.bool_:
        op = _BOOL_BITWISE.get(op, op)
    logical = _LOGICAL_OPS.get(op)
    if logical is not None:
        return ReductionPlan(NcclDataType.UINT8, logical[0], logical=True, parity=logical[1])
    native = NATIVE_OPS.get(op)
    if native is None:
        raise UnsupportedError(
            f"op: {op.name} on {describe(dtype)} is not supported by the nccl backend (NCCL "
            f"reduces with SUM, PROD, MIN, MAX and AVG; logical ops are emulated, bitwise "
            f"ones only on bool); use al.HostTransferCommunicator")
    return ReductionPlan(nccl_datatype(dtype, name), native)
