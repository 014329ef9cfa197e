"""Communication ops the data-parallel pass inserts (they run only under a
``ParallelExecutor`` given a communicator): ``allreduce``/``fused_allreduce``, and for the
reduce strategy ``reduce``/``fused_reduce`` (to the ``root`` attribute's rank) and
``broadcast``."""
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
        x = np.ascontiguousarray(ins["X"][0])
        out = np.empty_like(x)
        al.allreduce(x, _comm(ctx, self.type), recvbuf=out)
        return {"Out": [out]}


@register
class Reduce(OpKind):
    """``Out = sum of X over every rank`` on rank ``root``; elsewhere ``Out`` is ``X``
    (nothing there reads it: only the root runs the optimizer ops of that gradient)."""

    type = "reduce"
    differentiable = False
    communicates = True

    def compute(self, ins, attrs, ctx):
        x = np.ascontiguousarray(ins["X"][0])
        out = x.copy()
        al.reduce(x, _comm(ctx, self.type), root=attrs["root"], recvbuf=out)
        return {"Out": [out]}


@register
class Broadcast(OpKind):
    """``Out = X`` of rank ``root``, on every rank (a parameter after its owner updated it)."""

    type = "broadcast"
    differentiable = False
    communicates = True

    def compute(self, ins, attrs, ctx):
        out = np.array(ins["X"][0], order="C", copy=True)
        al.bcast(out, _comm(ctx, self.type), root=attrs["root"])
        return {"Out": [out]}


@register
class FusedAllreduce(OpKind):
    """One allreduce for several gradients: copied into one contiguous bucket, reduced by
    the bucket's persistent plan (made on first use, in ``al.shared_empty`` memory when every
    rank shares the node, so the zero-copy shared-memory allreduce applies), copied out.
    Gradients keep their order in the bucket, so the sum of each element is the same as
    reducing it alone; the algorithm the selector picks for the bucket's size may differ
    from the one it picks per gradient, which can change the last bits of a float sum."""

    type = "fused_allreduce"
    differentiable = False
    communicates = True

    def infer(self, block, op):
        for source, target in zip(op.inputs["X"], op.outputs["Out"]):
            out, x = block.var(target), block.var(source)
            out.shape, out.dtype = x.shape, x.dtype

    def compute(self, ins, attrs, ctx):
        _comm(ctx, self.type)
        grads = ins["X"]
        bucket, plan = ctx.bucket(attrs["bucket"], sum(g.size for g in grads), grads[0].dtype,
                                  attrs.get("root"))
        offset, outs = 0, []
        for grad in grads:
            bucket[offset:offset + grad.size] = grad.reshape(-1)
            offset += grad.size
        plan.run()
        offset = 0
        for grad in grads:
            outs.append(bucket[offset:offset + grad.size].reshape(grad.shape).copy())
            offset += grad.size
        return {"Out": outs}


@register
class FusedReduce(FusedAllreduce):
    """``fused_allreduce``'s bucket reduced to rank ``root`` only (the reduce strategy)."""

    type = "fused_reduce"


def _comm(ctx, op_type: str):
    comm = getattr(ctx, "comm", None)
    if comm is None:
        raise ExecutionError(f"op {op_type}: needs a communicator (run the program with "
                             "ParallelExecutor(..., comm=...))")
    return comm
