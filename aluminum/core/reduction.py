"""Reduction operators: the closed set, which dtypes each accepts, and how numpy computes it.

All operators are commutative.  Integer SUM, PROD and AVG wrap around on overflow (two's
complement, as C, numpy, NCCL and torch), on every backend and algorithm.

Floating-point SUM, PROD and AVG depend on the order of the operands once there are three or
more (two operands: IEEE addition and multiplication are commutative, bit for bit).  Every
algorithm gives the same bits in all its modes (blocking, nonblocking, persistent) and under
every AL_* diagnostic setting, but algorithms differ from each other.  In deterministic mode
(``set_deterministic(True)`` or ``AL_DETERMINISTIC=1``) every algorithm reduces those in rank
order, ``((x0 + x1) + x2) + ...``, so the bits depend on the inputs and the rank count only
(``sums_in_rank_order`` says where that applies; what it costs: docs/benchmarks.md).

``AVG`` is a sum followed by a division by the communicator size (floats: true division in
the element type; integers: truncation toward zero, as NCCL's ``ncclAvg``).  Logical
operators yield 0/1 (False/True) whatever the communicator size.
"""
from __future__ import annotations

import enum
import os

import numpy as np

from . import dtypes
from .errors import ArgumentError, UnsupportedError


class ReductionOp(enum.Enum):
    """The reduction operators of Aluminum (``al.SUM`` ... ``al.AVG``)."""

    SUM = "sum"
    PROD = "prod"
    MIN = "min"
    MAX = "max"
    LOR = "lor"
    LAND = "land"
    LXOR = "lxor"
    BOR = "bor"
    BAND = "band"
    BXOR = "bxor"
    AVG = "avg"

    # Enum's own __hash__ is Python code; ops are dict keys on the hot path.
    __hash__ = object.__hash__

    @property
    def is_logical(self) -> bool:
        return self in _LOGICAL

    @property
    def is_bitwise(self) -> bool:
        return self in _BITWISE

    @property
    def ufunc(self) -> np.ufunc:
        """The numpy ufunc that combines two operands (``np.add`` for SUM and AVG: AVG
        accumulates a sum and divides in ``finish``)."""
        return _UFUNCS[self]

    def reduce_into(self, inout: np.ndarray, other: np.ndarray) -> None:
        """``inout = inout (op) other`` element-wise, in place (AVG accumulates a sum)."""
        _UFUNCS[self](inout, other, out=inout)

    def order_sensitive(self, dtype: np.dtype) -> bool:
        """Whether the result's bits may depend on the order of three or more operands
        (floating-point SUM, PROD and AVG)."""
        return self in _ARITHMETIC and dtypes.is_floating(dtype)

    def finishes(self, comm_size: int) -> bool:
        """Whether ``finish`` may change a result for a communicator of ``comm_size`` ranks
        (when False, callers may skip it)."""
        return (self is ReductionOp.AVG and comm_size > 1) or \
            (comm_size == 1 and self in _LOGICAL)

    def finish(self, result: np.ndarray, comm_size: int) -> None:
        """Post-process a fully reduced result in place (AVG division, logical 0/1)."""
        if self is ReductionOp.AVG:
            if comm_size == 1:
                return
            if dtypes.is_integer(result.dtype):
                # Exact integer division rounded toward zero (as ncclAvg); going through
                # float64 would round sums beyond 2**53.
                quotient = np.floor_divide(result, comm_size)
                np.add(quotient, (quotient * comm_size != result) & (result < 0),
                       out=result, casting="unsafe")
            else:
                np.divide(result, result.dtype.type(comm_size), out=result)
        elif comm_size == 1 and self in _LOGICAL:
            np.not_equal(result, 0, out=result)


_LOGICAL = frozenset({ReductionOp.LOR, ReductionOp.LAND, ReductionOp.LXOR})
_BITWISE = frozenset({ReductionOp.BOR, ReductionOp.BAND, ReductionOp.BXOR})
_ARITHMETIC = frozenset({ReductionOp.SUM, ReductionOp.PROD, ReductionOp.AVG})

_UFUNCS = {
    ReductionOp.SUM: np.add,
    ReductionOp.AVG: np.add,
    ReductionOp.PROD: np.multiply,
    ReductionOp.MIN: np.minimum,
    ReductionOp.MAX: np.maximum,
    ReductionOp.LOR: np.logical_or,
    ReductionOp.LAND: np.logical_and,
    ReductionOp.LXOR: np.logical_xor,
    ReductionOp.BOR: np.bitwise_or,
    ReductionOp.BAND: np.bitwise_and,
    ReductionOp.BXOR: np.bitwise_xor,
}

_BY_NAME = {op.value: op for op in ReductionOp} | {op.name: op for op in ReductionOp}


def as_reduction_op(op: object) -> ReductionOp:
    """Accept ``al.SUM`` or a case-insensitive name such as ``"sum"``; reject anything else."""
    if type(op) is ReductionOp:
        return op
    found = _BY_NAME.get(op.lower()) if isinstance(op, str) else None
    if found is None:
        names = ", ".join(o.value for o in ReductionOp)
        raise ArgumentError(f"op: expected one of {names} (or al.SUM ...), got {op!r}")
    return found


_VALID_CACHE: dict[tuple[ReductionOp, np.dtype], bool] = {}


def check_op_for_dtype(op: ReductionOp, dtype: np.dtype) -> None:
    """Raise ``UnsupportedError`` when ``op`` is not defined on ``dtype`` (e.g. BAND on float)."""
    key = (op, dtype)
    ok = _VALID_CACHE.get(key)
    if ok is None:
        ok = _VALID_CACHE[key] = _op_allows(op, dtype)
    if not ok:
        raise UnsupportedError(f"op: {op.name} is not defined for dtype {dtypes.describe(dtype)}"
                               f"{_hint(op, dtype)}")


def _op_allows(op: ReductionOp, dtype: np.dtype) -> bool:
    if dtype == np.bool_:
        return op in _LOGICAL or op in _BITWISE or op in (ReductionOp.MIN, ReductionOp.MAX)
    if dtypes.is_integer(dtype):
        return True
    return op in _ARITHMETIC or op in (ReductionOp.MIN, ReductionOp.MAX)


def _hint(op: ReductionOp, dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return " (bool buffers take logical, bitwise, MIN and MAX ops)"
    return " (floating types take SUM, PROD, MIN, MAX and AVG)"


# Deterministic mode (AL_DETERMINISTIC=1 or set_deterministic); read where an operation is
# issued, on the calling thread, so every rank decides the same for the same call.
DETERMINISTIC = os.environ.get("AL_DETERMINISTIC", "").strip() not in ("", "0")


def set_deterministic(enabled: bool = True) -> None:
    """Turn deterministic mode on or off (``al.set_deterministic``): floating-point SUM,
    PROD and AVG reductions on three or more ranks are then computed in rank order by every
    algorithm, ``((x0 + x1) + x2) + ...``, so results do not depend on the algorithm, the
    mode or the selector's choice.  Every rank must make the same call at the same point of
    its program; operations issued before it keep the order they were issued with."""
    global DETERMINISTIC
    DETERMINISTIC = bool(enabled)


def deterministic() -> bool:
    """Whether deterministic mode is on."""
    return DETERMINISTIC


def sums_in_rank_order(op: ReductionOp, dtype: np.dtype, comm_size: int) -> bool:
    """Whether an allreduce of ``dtype`` with ``op`` on ``comm_size`` ranks must reduce in
    rank order: deterministic mode, an order-sensitive reduction, three ranks or more."""
    return DETERMINISTIC and comm_size > 2 and op.order_sensitive(dtype)


def reduce_in_rank_order(op: ReductionOp, operands, out: np.ndarray) -> None:
    """``out = ((operands[0] (op) operands[1]) (op) operands[2]) ...`` element-wise, before
    ``finish``.  ``out`` may be ``operands[0]`` or ``operands[1]``, no later one."""
    if len(operands) == 1:
        np.copyto(out, operands[0])
        return
    ufunc = _UFUNCS[op]
    ufunc(operands[0], operands[1], out=out)
    for operand in operands[2:]:
        ufunc(out, operand, out=out)
