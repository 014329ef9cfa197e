"""numpy dtype and ReductionOp -> MPI datatype and MPI.Op, for the MPI passthrough.

MPI has no float16/bfloat16 reductions, so those (and every op on them) go through custom
commutative MPI ops computed in numpy, which rounds each pairwise result to the element type
(Aluminum reduces halves in fp32 the same way).  Bool has only logical ops in MPI, so bitwise
and MIN/MAX on bool map to their logical equivalents.  AVG is reduced as SUM and divided after.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ...core.dtypes import HALF_PRECISION
from ...core.reduction import ReductionOp

_NATIVE_OPS = {
    ReductionOp.SUM: MPI.SUM, ReductionOp.AVG: MPI.SUM, ReductionOp.PROD: MPI.PROD,
    ReductionOp.MIN: MPI.MIN, ReductionOp.MAX: MPI.MAX,
    ReductionOp.LOR: MPI.LOR, ReductionOp.LAND: MPI.LAND, ReductionOp.LXOR: MPI.LXOR,
    ReductionOp.BOR: MPI.BOR, ReductionOp.BAND: MPI.BAND, ReductionOp.BXOR: MPI.BXOR,
}
_BOOL_OPS = {
    ReductionOp.BOR: MPI.LOR, ReductionOp.BAND: MPI.LAND, ReductionOp.BXOR: MPI.LXOR,
    ReductionOp.MAX: MPI.LOR, ReductionOp.MIN: MPI.LAND,
}

_datatypes: dict[np.dtype, MPI.Datatype] = {}
_ops: dict[tuple[ReductionOp, np.dtype], MPI.Op] = {}


def mpi_datatype(dtype: np.dtype) -> MPI.Datatype:
    """The MPI datatype that moves elements of ``dtype`` (halves: a 2-byte integer type)."""
    found = _datatypes.get(dtype)
    if found is None:
        found = MPI.UINT16_T if dtype in HALF_PRECISION else MPI.Datatype.fromcode(dtype.char)
        _datatypes[dtype] = found
    return found


def mpi_op(op: ReductionOp, dtype: np.dtype) -> MPI.Op:
    """The MPI.Op reducing ``dtype`` with ``op`` (before AVG's division)."""
    key = (op, dtype)
    found = _ops.get(key)
    if found is None:
        if dtype in HALF_PRECISION:
            found = MPI.Op.Create(_numpy_reducer(op, dtype), commute=True)
        elif dtype == np.bool_:
            found = _BOOL_OPS.get(op, _NATIVE_OPS[op])
        else:
            found = _NATIVE_OPS[op]
        _ops[key] = found
    return found


_plans: dict[tuple[ReductionOp, np.dtype], tuple[MPI.Datatype, MPI.Op, bool]] = {}


def mpi_plan(op: ReductionOp, dtype: np.dtype) -> tuple[MPI.Datatype, MPI.Op, bool]:
    """``(datatype, MPI op, needs op.finish)`` in one lookup, for the blocking hot path."""
    found = _plans.get((op, dtype))
    if found is None:
        needs_finish = op is ReductionOp.AVG or op.is_logical
        found = _plans[(op, dtype)] = (mpi_datatype(dtype), mpi_op(op, dtype), needs_finish)
    return found


def _numpy_reducer(op: ReductionOp, dtype: np.dtype):
    def reduce(inbuf, inoutbuf, datatype):
        op.reduce_into(np.frombuffer(inoutbuf, dtype), np.frombuffer(inbuf, dtype))
    return reduce
