"""numpy dtype and ReductionOp -> MPI datatype and MPI.Op, for the MPI passthrough.

MPI has no float16/bfloat16 reductions, so those (and every op on them) go through custom
commutative MPI ops computed in numpy, which rounds each pairwise result to the element type
(Aluminum reduces halves in fp32 the same way).  Bool has only logical ops in MPI, so bitwise
and MIN/MAX on bool map to their logical equivalents.  AVG is reduced as SUM and divided after.

Integer overflow wraps around (as C, numpy, NCCL and torch; every algorithm of every backend
follows this rule).  Open MPI's AVX op component saturates 8- and 16-bit integer sums of 16
elements or more instead (open-mpi/ompi#8045, won't fix): ``al.init`` and ``aluminum.run``
keep it out (``OMPI_MCA_op=^avx``) when they start MPI, and where MPI was started without
that (by the user's own ``from mpi4py import MPI``), ``mpi_op`` finds out by reducing a
probe locally (``MPI_Reduce_local``) and reduces those dtypes with numpy's wrapping kernels
through a custom op instead.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ...core.dtypes import is_half
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
        found = MPI.UINT16_T if is_half(dtype) else MPI.Datatype.fromcode(dtype.char)
        _datatypes[dtype] = found
    return found


def mpi_op(op: ReductionOp, dtype: np.dtype) -> MPI.Op:
    """The MPI.Op reducing ``dtype`` with ``op`` (before AVG's division)."""
    key = (op, dtype)
    found = _ops.get(key)
    if found is None:
        if is_half(dtype) or not _wraps(op, dtype):
            found = MPI.Op.Create(_numpy_reducer(op, dtype), commute=True)
        elif dtype == np.bool_:
            found = _BOOL_OPS.get(op, _NATIVE_OPS[op])
        else:
            found = _NATIVE_OPS[op]
        _ops[key] = found
    return found


_PROBE_COUNT = 64   # Open MPI's AVX kernels take over from 16 (8-bit) elements


def _wraps(op: ReductionOp, dtype: np.dtype) -> bool:
    """Whether MPI's own ``op`` on ``dtype`` wraps on overflow, as numpy does: checked on a
    probe that overflows, for the integer sums and products that some MPI op kernels
    (Open MPI's AVX component) saturate; assumed elsewhere."""
    if dtype.kind not in "iu" or dtype.itemsize > 2 or \
            op not in (ReductionOp.SUM, ReductionOp.AVG, ReductionOp.PROD):
        return True
    big = np.iinfo(dtype).max - 2
    inout, operand = np.full(_PROBE_COUNT, big, dtype), np.full(_PROBE_COUNT, big, dtype)
    expected = op.ufunc(inout, operand)
    _NATIVE_OPS[op].Reduce_local(operand, inout)
    return bool(np.array_equal(inout, expected))


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
