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


@register
class FusedAllreduce(OpKind):
    """One allreduce for several gradients: copied into one contiguous bucket, reduced by
    the bucket's persistent plan (made on first use, in ``al.shared_empty`` memory when every
    rank shares the node, so the zero-copy shared-memory allreduce applies), copied out.
    Gradients keep their order in the bucket, so the sum of each element is the same as
    reducing it alone; the algorithm the selector picks for the bucket's size may differ
    from the one it picks per gradient, which can change the last bits of a float sum.
    On a stream-bound communicator the kernel waits for the stream before copying out, so
    the op is finished when it returns (unlike ``allreduce``, which the executor orders by
    event)."""

    type = "fused_allreduce"
    differentiable = False
    communicates = True

    def infer(self, block, op):
        for source, target in zip(op.inputs["X"], op.outputs["Out"]):
            out, x = block.var(target), block.var(source)
            out.shape, out.dtype = x.shape, x.dtype

    def compute(self, ins, attrs, ctx):
        comm = getattr(ctx, "comm", None)
        if comm is None:
            raise ExecutionError("op fused_allreduce: needs a communicator")
        grads = ins["X"]
        bucket, plan = ctx.bucket(attrs["bucket"], sum(g.size for g in grads), grads[0].dtype)
        offset, outs = 0, []
        for grad in grads:
            bucket[offset:offset + grad.size] = grad.reshape(-1)
            offset += grad.size
        plan.run()
        if comm.stream is not None:   # a stream-ordered plan has only been enqueued
            comm.stream.synchronize()
        offset = 0
        for grad in grads:
            outs.append(bucket[offset:offset + grad.size].reshape(grad.shape).copy())
            offset += grad.size
        return {"Out": outs}
