"""``al.shared_empty``: numpy arrays in memory the ranks of a node share, for zero-copy
allreduces (the ``shared_memory`` algorithm reads and writes them in place, with no staging
copies; see backends/mpi/algorithms/shared_buffers.py).
"""
from __future__ import annotations

import operator

import numpy as np

from . import recall, validate
from .core import dtypes
from .core.errors import ArgumentError, UnsupportedError


def shared_empty(shape, dtype, comm) -> np.ndarray:
    """A new uninitialised C-contiguous array in memory shared by the ranks of ``comm`` on
    this node; a collective over those ranks (each passes its own ``shape``).

    Allreduces whose buffers all come from ``shared_empty`` on the same communicator (on
    every rank, in place or not) run without copies through staging memory when they use
    the ``shared_memory`` algorithm (``algo="shared_memory"``, or "automatic" where the
    tuning table picks it); so do views of them and objects over the same memory, such as
    ``torch.from_numpy(array)``.  Any other buffer works as usual.  Keep a bucket of them and
    copy gradients in, as Horovod's fusion buffer does.

    The memory stays valid until ``comm.free()`` or ``al.finalize()``; an array still
    referenced then keeps its memory (with a ``RuntimeWarning``) instead of losing it.

    What surprises people: from the first ``shared_empty`` on ``comm`` on, "automatic"
    chooses for ``comm`` by the tuning table's rules for communicators with shared buffers
    (``"buffers": "shared"``) - for every call on it, private buffers too, since every rank
    must choose alike and cannot see the others' buffers.  Those rules take
    ``shared_memory`` from far smaller sizes than the private ones (it stages private
    buffers, and then MPI's own allreduce is often faster): keep private mid-size
    allreduces on another communicator (``comm.copy()``).
    """
    comm = validate.check_comm(comm)
    allocate = comm.backend.allocate_shared
    if allocate is None:
        raise UnsupportedError(f"comm: shared_empty needs an MPI-backend communicator (host "
                               f"memory), got the {comm.backend.name} backend")
    shape = _shape(shape)
    try:
        dtype = np.dtype(dtype)
    except TypeError as exc:
        raise ArgumentError(f"dtype: not a numpy dtype: {dtype!r}") from exc
    if not dtypes.is_supported(dtype):
        raise ArgumentError(f"dtype: aluminum does not communicate {dtype}")
    count = int(np.prod(shape, dtype=np.int64))
    segment = allocate(comm, count * dtype.itemsize)
    if not comm.shares_buffers:   # every rank, at the same call: later calls choose again
        comm.shares_buffers = True
        recall.forget(comm)
    return segment.view(dtype).reshape(shape)


def _shape(shape) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints (an int is a 1-D shape)."""
    try:
        dims = (operator.index(shape),) if not isinstance(shape, (tuple, list)) else \
            tuple(operator.index(d) for d in shape)
    except TypeError as exc:
        raise ArgumentError(f"shape: expected an int or a tuple of ints, got {shape!r}") \
            from exc
    if any(d < 0 for d in dims):
        raise ArgumentError(f"shape: dimensions must be non-negative, got {dims}")
    return dims
