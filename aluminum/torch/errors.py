"""Errors raised by the torch glue: each derives from ``al.AluminumError`` and from the
builtin torch users already catch for the same mistake (``ValueError``, ``RuntimeError``)."""
from __future__ import annotations

import aluminum as al


class TensorError(al.BufferError):
    """A tensor handed to the "aluminum" process group cannot be communicated: not a CPU
    tensor, not contiguous, or of the wrong size for the collective (a ``ValueError``)."""


class GroupError(al.ArgumentError):
    """A process group cannot be made: its rank list is invalid, or the ranks torch gives do
    not match the MPI job's (a ``ValueError``)."""


class ReductionIncompleteError(al.AluminumError, RuntimeError):
    """``aluminum.torch.DistributedDataParallel`` found a bucket whose allreduce could never
    start: some parameter got no gradient in the last backward (a ``RuntimeError``, like
    torch DDP's "Expected to have finished reduction in the prior iteration")."""
