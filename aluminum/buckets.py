"""Gradient buckets: many tensors fused into one flat array, reduced by one persistent plan.

This is what torch's DDP calls a bucket and Horovod a fusion buffer, and the one
implementation behind both of aluminum's data-parallel front ends (the executor's
``ParallelExecutor`` and ``aluminum.torch.DistributedDataParallel``):

- ``assign_buckets`` decides which tensors share a bucket (the size cap and ordering rule);
- ``bucket_memory`` allocates a bucket's host memory (the shared-or-private rule);
- ``GradientBucket`` holds the memory, one view per tensor, and the persistent allreduce
  (or reduce) plan bound to it: ``start()`` once every tensor is written, ``wait()``
  before anyone reads the result.

A typical loop::

    groups = al.assign_buckets([g.nbytes for g in grads], [g.dtype for g in grads])
    buckets = [al.GradientBucket([grads[i].shape for i in group], grads[group[0]].dtype,
                                 comm, op=al.AVG) for group in groups]
    # each step: write (or compute) the gradients into bucket.views, start each bucket
    # once its views are written (in the same order on every rank), then
    for bucket in buckets:
        bucket.wait()                                      # bucket.views hold the average

What surprises people:

- The views *are* the bucket.  Writing into a view writes the bucket; the reduced result
  lands in the same views, so a caller that keeps a view after the next step's writes sees
  the next step's values.  Copy what must outlive a step.
- Shared memory is returned only when the communicator is freed (``comm.free()`` or
  ``al.finalize()``), not when a bucket is: make buckets once and keep them; pass
  ``provisional=True`` for buckets that will soon be replaced.
- Making a shared bucket is a collective over the communicator (``al.shared_empty``), and
  every rank must start its buckets' plans in the same order: build and start them in the
  order ``assign_buckets`` gives, on every rank.
- Buckets are numbered in the order they open, and with several keys (dtypes) a bucket can
  fill after one opened later: starting strictly in that order (as DDP does) may hold a
  full bucket back until the earlier one is full.  ``first_bucket_mb`` caps only the very
  first bucket, not the first of each key.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from .allreduce import allreduce_init
from .core.errors import ArgumentError
from .core.reduction import ReductionOp
from .reduce import reduce_init
from .shared import shared_empty

MIB = 2 ** 20


def assign_buckets(nbytes: Sequence[int], keys: Sequence[Hashable] | None = None,
                   bucket_cap_mb: float = 25.0, first_bucket_mb: float = 1.0
                   ) -> list[list[int]]:
    """Group tensors (given in launch order: the order their gradients are expected to be
    ready, usually reverse parameter order) into buckets; returns the buckets in the order
    they are opened, each a list of indices into ``nbytes``.

    The rule (deterministic: the same sizes and keys give the same buckets on every rank):
    each key (a dtype, or anything hashable that must not be mixed, such as the rank a
    reduce goes to) has one open bucket at a time; a tensor joins its key's open bucket
    unless that would take the bucket past its cap, in which case the bucket is closed and
    the tensor opens a new one.  The first bucket opened is capped at ``first_bucket_mb``
    (small, so communication starts early in backward), every other at ``bucket_cap_mb``.
    A bucket therefore never exceeds its cap, except that a tensor larger than the cap gets
    a bucket of its own (Horovod's fusion-threshold rule; torch's DDP instead closes a
    bucket once it reaches its cap, so its buckets can overshoot by one tensor).
    ``keys`` None: every tensor has the same key."""
    if keys is not None and len(keys) != len(nbytes):
        raise ArgumentError(f"keys: expected one per tensor ({len(nbytes)}), got {len(keys)}")
    for name, cap in (("bucket_cap_mb", bucket_cap_mb), ("first_bucket_mb", first_bucket_mb)):
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0:
            raise ArgumentError(f"{name}: expected a positive number of MiB, got {cap!r}")
    buckets: list[list[int]] = []
    open_buckets: dict[Hashable, tuple[list[int], int, float]] = {}
    for index, size in enumerate(nbytes):
        key = None if keys is None else keys[index]
        found = open_buckets.get(key)
        if found is not None and found[1] + size <= found[2]:
            found[0].append(index)
            open_buckets[key] = (found[0], found[1] + size, found[2])
            continue
        cap = (first_bucket_mb if not buckets else bucket_cap_mb) * MIB
        buckets.append([index])
        open_buckets[key] = (buckets[-1], size, cap)
    return buckets


def shares_memory(comm) -> bool:
    """Whether ``bucket_memory`` gives ``comm``'s buckets shared memory: ``comm``'s backend
    can allocate memory the node's ranks share (``al.shared_empty``: the MPI backend, host
    memory), and this rank's node holds more than one of ``comm``'s ranks.  On one node the
    zero-copy shared-memory allreduce then reduces the buckets in place; across nodes each
    node gets its own segment, which the hierarchical allreduce's node phases read and
    write directly.  Otherwise (one rank per node, a device backend) memory is private."""
    backend = getattr(comm, "backend", None)
    return getattr(backend, "allocate_shared", None) is not None and comm.local_size > 1


def bucket_memory(count: int, dtype, comm, provisional: bool = False) -> np.ndarray:
    """A flat host array of ``count`` elements of ``dtype`` for a bucket over ``comm``:
    ``al.shared_empty`` memory where ``shares_memory(comm)`` (a collective then), otherwise
    private ``np.empty``; uninitialised either way.  ``provisional=True`` (a bucket that
    will soon be replaced, such as DDP's before the first backward) always gets private
    memory, since shared memory is returned only when ``comm`` is freed."""
    if shares_memory(comm) and not provisional:
        return shared_empty(count, dtype, comm)
    return np.empty(count, dtype)


class GradientBucket:
    """One bucket: flat ``memory``, a view of it per tensor (``views``, in order, shaped as
    ``shapes``), and a persistent plan reducing the whole memory over ``comm``.

    ``memory`` None: ``bucket_memory(sum of the shapes' sizes + extra, dtype, comm,
    provisional)``.  Otherwise any flat, contiguous array aluminum accepts (a torch or cupy
    tensor, say a CUDA one) with at least that many elements; its dtype is used.
    ``extra`` elements after the tensors' are reduced along with them (the executor keeps
    its sample and rank counts there: a sum for free, no collective of its own).
    ``op`` is the plan's reduction; ``root`` not None makes it a reduce to that rank (the
    other ranks' memory is then left unspecified); ``stream`` orders it on a device stream.
    """

    def __init__(self, shapes: Sequence[Sequence[int]], dtype, comm, *, extra: int = 0,
                 op: ReductionOp = ReductionOp.SUM, root: int | None = None,
                 memory=None, stream=None, provisional: bool = False) -> None:
        self.shapes = tuple(tuple(shape) for shape in shapes)
        sizes = [int(np.prod(shape, dtype=np.int64)) for shape in self.shapes]
        count = sum(sizes) + extra
        if memory is None:
            memory = bucket_memory(count, dtype, comm, provisional)
        elif memory.shape != (count,):
            raise ArgumentError(f"memory: expected a flat array of {count} elements, got "
                                f"shape {tuple(memory.shape)}")
        self.memory, self.comm, self.op, self.root = memory, comm, op, root
        self.extra, self.stream = extra, stream
        self.reshape_views(self.shapes)
        self.plan = self._make_plan()
        self.request = None

    def _make_plan(self):
        if self.root is None:
            return allreduce_init(self.memory, self.comm, self.stream, op=self.op)
        return reduce_init(self.memory, self.comm, self.stream, root=self.root, op=self.op)

    @property
    def tensors(self):
        """The memory without the ``extra`` elements."""
        return self.memory[:len(self.memory) - self.extra]

    @property
    def tail(self):
        """The last ``extra`` elements."""
        return self.memory[len(self.memory) - self.extra:]

    def reshape_views(self, shapes: Sequence[Sequence[int]]) -> None:
        """Give ``views`` other ``shapes`` over the same memory and plan (as many elements
        in all); views taken before keep the old shapes."""
        shapes = tuple(tuple(shape) for shape in shapes)
        sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
        if sum(sizes) != len(self.memory) - self.extra:
            raise ArgumentError(f"shapes: expected {len(self.memory) - self.extra} elements "
                                f"in all, as the bucket holds, got shapes {shapes}")
        offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()
        self.shapes = shapes
        self.views = tuple(self.memory[offsets[i]:offsets[i + 1]].reshape(shape)
                           for i, shape in enumerate(shapes))

    def bind(self, stream) -> None:
        """Order the plan on ``stream`` from now on (a new plan when it differs: torch's
        backward may run on another stream than the last one)."""
        if stream is not self.stream:
            self.plan.free()
            self.stream = stream
            self.plan = self._make_plan()

    def start(self):
        """Start the reduction (nonblocking) and return its ``al.Request``; every tensor
        must be in its view.  Ranks must start their buckets in the same order."""
        self.request = self.plan.start()
        return self.request

    def wait(self, stream=None) -> None:
        """Wait for the started reduction: on the host, or with ``stream`` only order that
        stream's later work after it (the host goes on).  Nothing to wait for: no-op."""
        request, self.request = self.request, None
        if request is None:
            return
        if stream is None:
            request.wait()
        else:
            request.wait_on_stream(stream)

    def run(self) -> None:
        """Reduce now (blocking); on a stream-ordered plan, only enqueued."""
        self.plan.run()

    def free(self) -> None:
        """Free the plan; the memory stays with whoever holds it (shared memory until the
        communicator is freed)."""
        self.plan.free()
