"""Communication ops the data-parallel pass inserts (they run only under a
``ParallelExecutor`` given a communicator)."""
from __future__ import annotations

import numpy as np

import aluminum as al

from ..errors import ExecutionError
from .registry import OpKind, register


@register
class Allreduce(OpKind):
    """``Out = sum of X over every rank`` (out of place: gradients may share arrays)."""

    type = "allreduce"
    differentiable = False
    communicates = True

    def compute(self, ins, attrs, ctx):
        comm = getattr(ctx, "comm", None)
        if comm is None:
            raise ExecutionError("op allreduce: needs a communicator (run the program with "
                                 "ParallelExecutor(..., comm=...))")
        x = np.ascontiguousarray(ins["X"][0])
        out = np.empty_like(x)
        al.allreduce(x, comm, recvbuf=out)
        return {"Out": [out]}
