"""Communication ops the data-parallel pass inserts (they run only under a
``ParallelExecutor`` given a communicator): ``allreduce``/``fused_allreduce``, and for the
reduce strategy ``reduce``/``fused_reduce`` (to the ``root`` attribute's rank) and
``broadcast``."""
from __future__ import annotations

import numpy as np

import aluminum as al

from ..errors import ExecutionError
from ..layouts.traffic import record_allreduce
from .registry import OpKind, register


@register
class Allreduce(OpKind):
    """``Out = sum of X over every rank``, for one gradient or (``fused_allreduce``) several.

    The sum is taken in the op's bucket (``attrs["bucket"]``, see executor/buckets.py):
    memory and a persistent allreduce plan made once and kept for every later step, in
    ``al.shared_empty`` memory when every rank of an MPI communicator shares the node, so
    the zero-copy shared-memory allreduce applies.  A gradient its producer already wrote
    into its view of the bucket is used where it is; any other is copied in first.  On a
    stream-bound communicator the kernel waits for the stream after the plan, so the op is
    finished when it returns.  The outputs are the gradients' views of the bucket, valid
    until their producers run again in the next step (``run`` returns copies of what it
    fetches).  Gradients keep their order in a bucket, so each element's sum is the same
    as reducing it alone; the algorithm the selector picks for a bucket's size may differ
    from the one it picks per gradient, which can change the last bits of a float sum.

    After the gradients the bucket carries this rank's sample count (``Samples``, under
    ``gradient_scale="samples"``) and a 1 saying it takes part; once reduced, the bucket is
    weighed as the ``gradient_scale`` attribute says (``Buckets.weigh``).

    The sharded pass (sharding/program_pass.py) makes these ops too, for gradients summed
    over every rank; an ``Executor`` running such a program has no buckets, and there each
    gradient is summed in a copy.  ``count_traffic`` counts an allreduce as the
    redistributions' (layouts/traffic.py)."""

    type = "allreduce"
    differentiable = False
    communicates = True

    def infer(self, block, op):
        for source, target in zip(op.inputs["X"], op.outputs["Out"]):
            out, x = block.var(target), block.var(source)
            out.shape, out.dtype = x.shape, x.dtype

    def compute(self, ins, attrs, ctx, out):
        comm = _comm(ctx, self.type)
        grads = ins["X"]
        if ctx.buckets is None and attrs.get("root") is None:
            sums = [np.array(grad, order="C", copy=True) for grad in grads]
            for total in sums:
                al.allreduce(total, comm)
                record_allreduce(total.size, total.itemsize, comm.size, comm.rank)
            return {"Out": sums}
        bucket = ctx.buckets.get(attrs.get("bucket", id(attrs)),
                                 tuple(grad.shape for grad in grads), grads[0].dtype,
                                 attrs.get("root"))
        for grad, view in zip(grads, bucket.views):
            if not holds(view, grad):
                view[...] = grad
        bucket.tail[...] = (float(ins["Samples"][0][0]) if "Samples" in ins else 0.0, 1.0)
        bucket.run()
        if attrs.get("root") is None:
            record_allreduce(bucket.memory.size - bucket.extra, bucket.memory.itemsize,
                             comm.size, comm.rank)
        if comm.stream is not None:   # a stream-ordered plan has only been enqueued
            comm.stream.synchronize()
        if attrs.get("root", comm.rank) == comm.rank:   # a reduce's other ranks hold no sum
            ctx.buckets.weigh(bucket, attrs.get("gradient_scale", "one"))
        return {"Out": list(bucket.views)}


@register
class FusedAllreduce(Allreduce):
    type = "fused_allreduce"


@register
class Reduce(Allreduce):
    """``allreduce`` to rank ``root`` only (the reduce strategy); elsewhere ``Out`` is left
    unspecified: nothing there reads it, as only the root runs that gradient's optimizer."""

    type = "reduce"


@register
class FusedReduce(Reduce):
    type = "fused_reduce"


@register
class Broadcast(OpKind):
    """``Out = X`` of rank ``root``, on every rank (a parameter after its owner updated it)."""

    type = "broadcast"
    differentiable = False
    communicates = True

    def compute(self, ins, attrs, ctx, out):
        value = np.array(ins["X"][0], order="C", copy=True)
        al.bcast(value, _comm(ctx, self.type), root=attrs["root"])
        return {"Out": [value]}


def holds(view: np.ndarray, value) -> bool:
    """Whether ``value`` already is ``view``'s memory (same start, shape and dtype)."""
    return value is view or (
        type(value) is np.ndarray and value.dtype == view.dtype and
        value.shape == view.shape and value.flags.c_contiguous and
        value.__array_interface__["data"][0] == view.__array_interface__["data"][0])


def _comm(ctx, op_type: str):
    comm = getattr(ctx, "comm", None)
    if comm is None:
        raise ExecutionError(f"op {op_type}: needs a communicator (run the program with "
                             "ParallelExecutor(..., comm=...))")
    return comm
