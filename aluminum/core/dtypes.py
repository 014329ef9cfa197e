"""The element types aluminum communicates, and which reduction ops each allows.

Every numpy integer and floating type, ``bool`` (logical and bitwise ops only), ``float16``
and ``bfloat16`` (from ml_dtypes).  Half-precision types have no native MPI reduction; the
MPI backend reduces them through custom MPI ops computed in numpy (see backends/mpi/datatypes.py).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

SUPPORTED_DTYPES: frozenset[np.dtype] = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64,
        np.float16, np.float32, np.float64, np.longdouble,
    )
) | {bfloat16}

HALF_PRECISION: frozenset[np.dtype] = frozenset({np.dtype(np.float16), bfloat16})


def is_integer(dtype: np.dtype) -> bool:
    """True for signed and unsigned integer types (not bool)."""
    return dtype.kind in "iu"


def is_floating(dtype: np.dtype) -> bool:
    """True for float16/32/64, long double and bfloat16."""
    return dtype.kind == "f" or dtype == bfloat16


def describe(dtype: np.dtype) -> str:
    """The short name used in error messages, e.g. ``float32`` or ``bfloat16``."""
    return str(dtype)
