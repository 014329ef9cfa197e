"""The element types aluminum communicates, and which reduction ops each allows.

Every numpy integer and floating type, ``bool`` (logical and bitwise ops only), ``float16``
and ``bfloat16`` (from ml_dtypes).  Half-precision types have no native MPI reduction; the
MPI backend reduces them through custom MPI ops computed in numpy (see backends/mpi/datatypes.py).

ml_dtypes is imported when ``bfloat16`` is first asked for (``al.bfloat16``,
``dtypes.bfloat16``), not with aluminum: its import registers numpy loops for a dozen types
and can take most of a second (ml_dtypes 0.7), paid by every rank of every job.  An
array of bfloat16 can only exist once ml_dtypes is imported, so the checks below look for it
in ``sys.modules`` rather than importing it.
"""
from __future__ import annotations

import sys

import numpy as np

# numpy's own types; bfloat16 is recognized by ``is_bfloat16``.
NATIVE_DTYPES: frozenset[np.dtype] = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64,
        np.float16, np.float32, np.float64, np.longdouble,
    )
)
_FLOAT16 = np.dtype(np.float16)


def __getattr__(name: str):
    if name == "bfloat16":   # (module attribute on first use: imports ml_dtypes)
        import ml_dtypes
        globals()["bfloat16"] = found = np.dtype(ml_dtypes.bfloat16)
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_bfloat16(dtype: np.dtype) -> bool:
    """True for ml_dtypes' bfloat16 (False, without importing it, where nobody has)."""
    if dtype.kind != "V" or dtype.itemsize != 2:
        return False
    ml_dtypes = sys.modules.get("ml_dtypes")
    return ml_dtypes is not None and dtype == ml_dtypes.bfloat16


def is_supported(dtype: np.dtype) -> bool:
    """True for the types aluminum communicates (module docstring)."""
    return dtype in NATIVE_DTYPES or is_bfloat16(dtype)


def is_half(dtype: np.dtype) -> bool:
    """True for float16 and bfloat16, the types MPI cannot reduce natively."""
    return dtype == _FLOAT16 or is_bfloat16(dtype)


def is_integer(dtype: np.dtype) -> bool:
    """True for signed and unsigned integer types (not bool)."""
    return dtype.kind in "iu"


def is_floating(dtype: np.dtype) -> bool:
    """True for float16/32/64, long double and bfloat16."""
    return dtype.kind == "f" or is_bfloat16(dtype)


def describe(dtype: np.dtype) -> str:
    """The short name used in error messages, e.g. ``float32`` or ``bfloat16``."""
    return str(dtype)
