"""The memory the data-parallel ops reduce gradients in, and which producers write there.

Every ``allreduce``/``reduce`` op (fused or not) reduces its gradients in its bucket, an
``al.GradientBucket`` (aluminum/buckets.py: the same buckets as aluminum.torch's DDP): one
contiguous array holding them in order, then a tail of ``TAIL`` = 2 numbers (this rank's
samples under ``gradient_scale="samples"``, and 1 for a rank that takes part in the step,
0 for one that has joined, see join.py), with a persistent allreduce (or reduce) plan bound
to it, made once and reused every step.  So every reduced bucket knows how many samples and
how many ranks its sums came from, at the cost of two elements, not of a collective:
``weigh`` turns the sums into the average the build strategy asked for.  The memory is
shared by the node's ranks by ``al.bucket_memory``'s rule (an MPI communicator with more
than one rank on this node), so the shared-memory allreduce (one node) or the hierarchical
allreduce's node phases (several) read and write it in place.
Each gradient has a view in it (``views``), which the op returns as its output, so the
optimizer reads the reduced gradient where it was reduced.

``gradient_destinations`` picks, once per executor, the op that finishes each gradient and
hands it the gradient's view as the output's destination (see ``Destinations``): the
gradient is computed straight into the bucket and the op finds it there, with nothing to
copy in or out.  A gradient is left out (its producer writes a fresh array, the op copies it
in) when zero-copy would let the reduction change what another op sees: when another op
reads the gradient before it is reduced (that op may keep a view of it, such as
``reshape``'s output), when its producer writes it twice, or when its producer reads, as
the run starts, a gradient that a bucket reduced in the previous step (it could read its own
destination).  Across steps nothing more is needed: ``ParallelExecutor.run`` returns only
once every op of the step has finished, so the next step's producers never write a bucket
that is still being reduced or read.  What surprises people: a variable the program made a
view of a reduced gradient (rather than a copy) is valid only until that gradient's
producer runs in the next step, which is before its reduction runs.
"""
from __future__ import annotations

import numpy as np

import aluminum as al

from .errors import ExecutionError
from .ops.collective import Allreduce
from .ops.registry import Destinations, get
from .scope import Scope
from .ssa_graph import COMPUTE, SSAGraph


TAIL = 2          # elements after the gradients: samples, ranks


class Buckets:
    """The buckets of one executor (``al.GradientBucket``s with a tail of ``TAIL``), by the
    ``bucket`` attribute of their op.
    ``divide_by_initial_world_size``: under "coeff_num_device", a step in which some ranks
    have joined (join.py) divides the sum by the size of the communicator (True) or by the
    number of ranks that took part (False, the default)."""

    def __init__(self, comm) -> None:
        self.comm = comm
        self.divide_by_initial_world_size = False
        self._buckets: dict[int, al.GradientBucket] = {}

    def get(self, key: int, shapes: tuple, dtype, root: int | None = None
            ) -> al.GradientBucket:
        """Bucket ``key`` for gradients of these shapes and ``dtype``: made (memory and
        plan: an allreduce, or with ``root`` a reduce to that rank) on first use, a
        collective over the communicator; remade if the gradients changed size or dtype."""
        found = self._buckets.get(key)
        dtype = np.dtype(dtype)
        shapes = tuple(tuple(shape) for shape in shapes)
        if found is not None and found.memory.dtype == dtype:
            if found.shapes != shapes and \
                    sum(int(np.prod(shape, dtype=np.int64)) for shape in shapes) == \
                    found.memory.size - TAIL:
                found.reshape_views(shapes)
            if found.shapes == shapes:
                return found
        if found is not None:
            found.free()
        bucket = self._buckets[key] = al.GradientBucket(shapes, dtype, self.comm, extra=TAIL,
                                                        root=root)
        return bucket

    def weigh(self, bucket: al.GradientBucket, gradient_scale: str) -> None:
        """Turn a reduced bucket's sums into what ``gradient_scale`` asks for, from its
        tail: "samples" divides by the samples of every rank (``ExecutionError`` when there
        are none, or more than the bucket's dtype counts exactly); "coeff_num_device"
        (gradients already scaled by 1/ranks) rescales to the ranks that took part when
        some have joined, unless ``divide_by_initial_world_size``; the others stay sums."""
        samples, ranks = (float(value) for value in bucket.tail)
        if gradient_scale == "samples":
            limit = _exact_integers(bucket.memory.dtype)
            if samples == 0:
                raise ExecutionError("gradient_scale: 'samples' found no sample on any rank "
                                     "in this step (every share of the batch was empty)")
            if samples > limit:
                raise ExecutionError(f"gradient_scale: 'samples' counts in the gradients' "
                                     f"dtype {bucket.memory.dtype}, exact up to {limit} "
                                     f"samples, got {samples:.0f}")
            np.divide(bucket.tensors, samples, out=bucket.tensors)
        elif gradient_scale == "coeff_num_device" and 0 < ranks != self.comm.size and \
                not self.divide_by_initial_world_size:
            gradients = bucket.tensors
            np.multiply(gradients, gradients.dtype.type(self.comm.size / ranks), out=gradients)

    def release(self, scope: Scope) -> None:
        """Let the buckets go: variables of ``scope`` that are views of one (the reduced
        gradients of the last step) become copies, and the plans are freed, so that the
        communicator can give the buckets' shared memory back when it is freed."""
        buckets, self._buckets = self._buckets, {}
        for bucket in buckets.values():
            bucket.free()
            for name, value in list(scope.items()):
                if isinstance(value, np.ndarray) and np.may_share_memory(value, bucket.memory):
                    scope[name] = value.copy()


def _exact_integers(dtype) -> int:
    """The largest count below which every integer is exact in ``dtype``."""
    try:
        mantissa = np.finfo(dtype).nmant
    except ValueError:
        import ml_dtypes   # bfloat16 and friends
        mantissa = ml_dtypes.finfo(dtype).nmant
    return 2 ** (mantissa + 1)


def gradient_destinations(graph: SSAGraph, block, buckets: Buckets) -> dict[int, Destinations]:
    """For each op of ``graph`` that finishes a gradient a bucket reduces: the
    ``Destinations`` of its outputs, by op index (see the module docstring for which
    gradients qualify).  Makes every bucket whose gradients have known shapes, in program
    order (a collective: every rank runs the same program)."""
    reducers = [handle for handle in graph.ops if isinstance(get(handle.op.type), Allreduce)]
    reduced = {name for handle in reducers for name in handle.op.output_names()}
    found: dict[int, Destinations] = {}
    for reducer in reducers:
        names = reducer.op.inputs["X"]
        variables = [block.var(name) for name in names]
        if any(d < 0 for var in variables for d in var.shape) or \
                len({var.dtype for var in variables}) != 1:
            continue
        attrs = reducer.op.attrs
        bucket = buckets.get(attrs.get("bucket", id(attrs)),
                             tuple(tuple(var.shape) for var in variables),
                             variables[0].dtype, attrs.get("root"))
        versions = {v.name: v for v in reducer.inputs if not v.dummy}
        for name, view in zip(names, bucket.views):
            version = versions[name]
            producer = version.generated_op
            if producer is None or producer.kind != COMPUTE or \
                    version.pending_ops != [reducer] or \
                    producer.op.output_names().count(name) != 1 or \
                    any(v.generated_op is None and v.name in reduced for v in producer.inputs):
                continue
            slots = found.setdefault(producer.index, Destinations()).slots
            for slot, outputs in producer.op.outputs.items():
                if name in outputs:
                    slots.setdefault(slot, [None] * len(outputs))[outputs.index(name)] = view
    return found
