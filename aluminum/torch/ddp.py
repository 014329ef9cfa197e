"""``aluminum.torch.DistributedDataParallel``: data parallelism whose gradients live in
aluminum buckets and are averaged by persistent allreduces while backward still runs.

How an iteration goes:
- ``forward`` (re)installs every existing ``.grad`` as a view into its bucket, after the
  first iteration rebuilds the buckets in the order gradients arrived (rank 0's order,
  broadcast: every rank the same), and broadcasts module buffers from rank 0 when
  ``broadcast_buffers``.
- backward accumulates each gradient straight into its bucket view, or, where the optimizer
  set ``.grad`` to None (``zero_grad()``'s default), the parameter's post-accumulate-grad
  hook copies the new gradient into its view (one pass over it, where zeroing the view
  first and accumulating into it took three) and makes the view its ``.grad``; the hook
  counts it, and once a bucket has all its gradients the buckets
  that are complete are started strictly in index order (the same order on every rank, so
  no rank waits on an allreduce another has not started).
- the end of backward (a callback queued on torch's autograd engine, as torch's reducer
  does) starts what is left and waits for every bucket, so when ``loss.backward()``
  returns each ``.grad`` holds the average over ranks.

Buckets are ``al.GradientBucket``s (aluminum/buckets.py, shared with the executor's data
parallelism): ``al.assign_buckets`` groups the parameters, and ``al.bucket_memory`` gives
them memory shared by the node's ranks when this node holds several of the group's ranks
(the zero-copy shared-memory allreduce on one node, the hierarchical allreduce's node phases
across nodes, then read and write them in place), else private tensors; the
first iteration's buckets are private either way (provisional: they are rebuilt after it,
and shared memory is returned only when the communicator is freed).

A model on a CUDA device gets CUDA buckets, averaged on the communicator's GPU twin (NCCL, or
host-transfer where ranks share a GPU: see ``devices``) and ordered on torch's current
stream: the end of backward makes that stream wait for the buckets, the host does not wait.

Uneven inputs follow torch's ``Join`` (``torch.distributed.algorithms.join``): the wrapper is
a ``Joinable``, so ``with Join([ddp]):`` or ``with ddp.join():`` lets ranks run different
numbers of iterations.  Each forward inside it first allreduces a "still active" 1 over the
default torch process group (as ``Join.notify_join_context``, but blocking, as the joined
ranks' count is); a rank whose data has ended
counts the active ranks the same way and, while there are any, shadows an iteration
(``_DDPJoinHook.main_hook``: the forward's collectives, then every bucket's allreduce in
index order on zeros).  The active ranks' gradients of such an iteration are averaged over
the ranks that took part (``divide_by_initial_world_size=False``, the default here, where
torch's DDP defaults to True) or over every rank (True: joined ranks count as zeros).  Once
all have joined, parameters and buffers are broadcast from one of the last ranks to join,
as torch's DDP does.
"""
from __future__ import annotations

import atexit
import contextlib
import weakref
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

import aluminum as al

from . import devices
from .comm_hooks import GradBucket
from .errors import ReductionIncompleteError, TensorError
from .rendezvous import world_communicator

_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}
_live: "weakref.WeakSet[DistributedDataParallel]" = weakref.WeakSet()
_atexit_registered = False


class _Bucket:
    """Parameters whose gradients are the views of one ``al.GradientBucket`` (``.reduction``:
    its flat ``memory`` tensor, persistent AVG allreduce and request), and what this
    iteration's backward has delivered to it."""

    def __init__(self, indices: list[int], params: list[torch.nn.Parameter],
                 reduction: al.GradientBucket) -> None:
        self.indices = indices          # positions in the DDP's parameter list
        self.params = params
        self.reduction = reduction
        self.buffer: torch.Tensor = reduction.memory
        self.views: tuple[torch.Tensor, ...] = reduction.views
        self.pending = len(params)
        self.ready = [False] * len(params)
        self.future: torch.futures.Future | None = None


class DistributedDataParallel(torch.nn.Module, Joinable):
    """Wrap ``module`` for data-parallel training over ``comm`` (default: every MPI rank).

    Parameters are broadcast from rank 0 here (a collective: every rank constructs it).
    ``bucket_cap_mb``/``first_bucket_mb``: bucket size limits in MiB (the first bucket, whose
    gradients arrive first, is small so communication starts early); a bucket never exceeds
    its cap unless one gradient alone does (``al.assign_buckets``; torch's DDP lets a bucket
    overshoot its cap by one gradient).
    ``find_unused_parameters``: parameters that get no gradient in a backward count as zero
    gradients (their buckets start at the end of backward).  Without it such a parameter
    raises ``ReductionIncompleteError`` naming it at the end of that backward, after the
    buckets were still averaged on every rank (so no rank hangs).
    ``broadcast_buffers``: copy rank 0's module buffers (BatchNorm statistics) to every rank
    at each forward, as torch's DDP does.

    Surprise: ``.grad`` tensors are views into the buckets; replacing one (``p.grad = t``)
    makes the next backward copy it into the bucket once.  ``close()`` (run at exit)
    releases the buckets' shared memory.  ``join()``: see the module docstring.
    """

    def __init__(self, module: torch.nn.Module, comm: al.Communicator | None = None,
                 bucket_cap_mb: float = 25, first_bucket_mb: float = 1,
                 find_unused_parameters: bool = False, broadcast_buffers: bool = True) -> None:
        super().__init__()
        Joinable.__init__(self)
        self.module = module
        self.comm = comm if comm is not None else world_communicator()
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers
        self._cap_mb, self._first_cap_mb = bucket_cap_mb, first_bucket_mb
        self._names = [name for name, p in module.named_parameters() if p.requires_grad]
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._device = self._check_params()
        # the communicator gradients are averaged on: comm itself, or its GPU twin
        self._grad_comm = self.comm if self._device.type == "cpu" else \
            devices.communicator_for(self.comm, self._device)
        self._sync_from(list(self._params) + list(module.buffers()), 0)
        self._require_sync = True
        self._hook_state: Any = None
        self._comm_hook: Callable | None = None
        self._ready_order: list[int] | None = []     # recorded until the buckets are rebuilt
        self._active_ranks: int | None = None     # this iteration's join count
        self._divide_by_initial_world_size = False
        self._in_backward = False
        self._next_to_start = 0
        self._buckets = self._make_buckets(list(reversed(range(len(self._params)))),
                                           provisional=True)
        self._where = {}
        self._index_buckets()
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i))
                         for i, p in enumerate(self._params)]
        self._track_for_exit()

    # -- public ------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        """Run the wrapped module; prepares the buckets for the backward that follows."""
        self._active_ranks = self._notify_join_context()
        self._prepare_iteration(active=True)
        return self.module(*args, **kwargs)

    def _prepare_iteration(self, active: bool) -> None:
        """What a forward does besides running the module (a joined rank's shadow does it
        too: it has the same collectives): rebuild the buckets after the first iteration,
        install the views, broadcast buffers, reset the buckets' counts."""
        if self._require_sync and self._ready_order and len(self._ready_order) == \
                len(self._params):
            self._rebuild()
        self._install_views()
        if self.broadcast_buffers and self.comm.size > 1:
            self._sync_from(list(self.module.buffers()), self._buffer_source(active))
        for bucket in self._buckets:
            bucket.pending, bucket.ready = len(bucket.params), [False] * len(bucket.params)
            bucket.future = None
        self._next_to_start = 0

    def _buffer_source(self, active: bool) -> int:
        """Rank 0, or inside a join the lowest rank still active (one more allreduce, only
        when there are buffers to broadcast, as torch's DDP finds its authoritative rank)."""
        if not self._join_config.enable or not any(True for _ in self.module.buffers()):
            return 0
        lowest = np.array([self.comm.rank if active else self.comm.size], np.int64)
        al.allreduce(lowest, self.comm, op=al.MIN)
        return int(lowest[0])

    # -- uneven inputs (torch's Join) -----------------------------------------------------------

    def _notify_join_context(self) -> int | None:
        """Inside a join: torch's ``Join.notify_join_context`` with a blocking allreduce
        (this rank's 1 in the count of active ranks; the count, once summed, is returned).
        torch's sends the 1 nonblocking, but its joined ranks count blocking, and aluminum
        matches a blocking collective only with blocking ones on the other ranks (as MPI)."""
        config = self._join_config
        if not config.enable or not config.is_first_joinable:
            return None
        import torch.distributed as dist

        ones = torch.ones(1, device=self.join_device)
        dist.all_reduce(ones, group=self.join_process_group)
        if config.throw_on_early_termination:
            zeros = torch.zeros(1, device=self.join_device)
            dist.all_reduce(zeros, group=self.join_process_group)
            if zeros.item():
                raise RuntimeError("Detected at least one rank that exhausted inputs. "
                                   "Throwing across all ranks.")
        return int(ones.item())

    def join(self, divide_by_initial_world_size: bool = False, enable: bool = True,
             throw_on_early_termination: bool = False) -> Join:
        """``Join([self], ...)``: torch DDP's ``join()``; see the module docstring.  Needs
        ``torch.distributed`` initialized over the same ranks (the join count goes over the
        default process group, as torch's Join does)."""
        return Join([self], enable, throw_on_early_termination,
                    divide_by_initial_world_size=divide_by_initial_world_size)

    def join_hook(self, **kwargs) -> JoinHook:
        """The hook torch's ``Join`` runs on a rank whose inputs have ended."""
        divide = kwargs.get("divide_by_initial_world_size", False)
        if not isinstance(divide, bool):
            raise al.ArgumentError(f"divide_by_initial_world_size: expected True or False, "
                                   f"got {divide!r}")
        return _JoinHook(self, divide)

    @property
    def join_device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def join_process_group(self):
        """The default torch process group: torch's ``Join`` counts active ranks over it."""
        import torch.distributed as dist

        if not dist.is_initialized():
            raise al.ArgumentError("join: expected torch.distributed to be initialized "
                                   "(dist.init_process_group('aluminum')), got an "
                                   "uninitialized torch.distributed; torch's Join counts the "
                                   "active ranks over its default process group")
        if dist.get_world_size() != self.comm.size:
            raise al.ArgumentError(f"join: expected the default process group to have this "
                                   f"wrapper's {self.comm.size} ranks, got "
                                   f"{dist.get_world_size()}")
        return dist.group.WORLD

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally; the first backward after
        the block averages the accumulated sum (gradient accumulation)."""
        previous, self._require_sync = self._require_sync, False
        try:
            yield
        finally:
            self._require_sync = previous

    def register_comm_hook(self, state: Any, hook: Callable) -> None:
        """Replace each bucket's AVG allreduce by ``hook(state, GradBucket) -> Future``
        (see ``aluminum.torch.comm_hooks``; ``state`` None means this DDP's communicator).
        Once, before the first forward.  On CUDA buckets that communicator is the GPU twin
        (NCCL or host-transfer), and the hook's future is waited for on the host."""
        if self._comm_hook is not None:
            raise al.ArgumentError("hook: register_comm_hook may be called only once")
        self._hook_state = self._grad_comm if state is None else state
        self._comm_hook = hook

    def buckets(self) -> list[GradBucket]:
        """The buckets in launch order, as comm hooks see them (``GradBucket``: ``index()``,
        ``buffer()``, ``parameters()``, ...).  Before the first backward they follow the
        reverse parameter order; after it, the order gradients arrived in on rank 0."""
        last = len(self._buckets) - 1
        return [GradBucket(b, bucket.buffer, bucket.params, b == last)
                for b, bucket in enumerate(self._buckets)]

    def close(self) -> None:
        """Give the buckets back: each ``.grad`` becomes a private copy, the persistent
        plans are freed and the shared memory released.  The wrapper is unusable after."""
        for handle in self._handles:
            handle.remove()
        for p in self._params:
            if p.grad is not None:
                p.grad = p.grad.clone()
        for bucket in self._buckets:
            bucket.reduction.free()
        self._buckets = []
        _live.discard(self)

    # -- buckets -----------------------------------------------------------------------------

    def _make_buckets(self, order: list[int], provisional: bool) -> list[_Bucket]:
        """Buckets over the parameters in ``order`` (launch order) by ``al.assign_buckets``'s
        rule (one dtype per bucket, the first capped at ``first_bucket_mb``, the others at
        ``bucket_cap_mb``); host memory by ``al.bucket_memory``'s rule (``provisional``:
        private, for the first iteration's buckets, which are rebuilt after it)."""
        params = [self._params[i] for i in order]
        groups = al.assign_buckets([p.numel() * p.element_size() for p in params],
                                   [p.dtype for p in params], self._cap_mb, self._first_cap_mb)
        return [self._bucket([order[k] for k in group], provisional) for group in groups]

    def _bucket(self, indices: list[int], provisional: bool) -> _Bucket:
        params = [self._params[i] for i in indices]
        dtype, count = params[0].dtype, sum(p.numel() for p in params)
        shapes = [p.shape for p in params]
        if self._device.type == "cuda":
            memory = torch.zeros(count, dtype=dtype, device=self._device)
            return _Bucket(indices, params, al.GradientBucket(
                shapes, None, self._grad_comm, op=al.AVG, memory=memory,
                stream=devices.current_stream(self._device)))
        if dtype == torch.bfloat16:     # numpy has no bfloat16: the same bits as int16
            memory = torch.from_numpy(al.bucket_memory(count, np.int16, self.comm,
                                                       provisional)).view(torch.bfloat16)
        else:
            memory = torch.from_numpy(al.bucket_memory(count, _NUMPY[dtype], self.comm,
                                                       provisional))
        memory.zero_()
        return _Bucket(indices, params, al.GradientBucket(shapes, None, self.comm, op=al.AVG,
                                                          memory=memory))

    def _index_buckets(self) -> None:
        self._where = {i: (b, k) for b, bucket in enumerate(self._buckets)
                       for k, i in enumerate(bucket.indices)}

    def _rebuild(self) -> None:
        """Buckets in the order gradients arrived on rank 0 (broadcast, all follow), in
        shared memory where ``al.shares_memory`` says so; current gradients move along."""
        order = torch.tensor(self._ready_order, dtype=torch.int64)
        al.bcast(order, self.comm, root=0)
        old = self._buckets
        self._buckets = self._make_buckets(order.tolist(), provisional=False)
        for bucket in self._buckets:
            for p, view in zip(bucket.params, bucket.views):
                if p.grad is not None:
                    view.copy_(p.grad)
                    p.grad = view
        for bucket in old:
            bucket.reduction.free()
        self._index_buckets()
        self._ready_order = None

    def _install_views(self) -> None:
        """Gradients kept from before (accumulation) move into their views; a None stays
        None until backward writes it (``_grad_ready``) or it is found unused."""
        for bucket in self._buckets:
            for p, view in zip(bucket.params, bucket.views):
                if p.grad is not None and p.grad.data_ptr() != view.data_ptr():
                    view.copy_(p.grad)
                    p.grad = view

    # -- backward ----------------------------------------------------------------------------

    def _hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def ready(param: torch.Tensor) -> None:
            self._grad_ready(index, param)
        return ready

    def _grad_ready(self, index: int, param: torch.Tensor) -> None:
        b, k = self._where[index]
        bucket = self._buckets[b]
        view = bucket.views[k]
        if param.grad.data_ptr() != view.data_ptr():     # replaced since the last forward
            view.copy_(param.grad)
            param.grad = view
        if not self._require_sync:
            return
        if not self._in_backward:
            self._in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        if bucket.ready[k]:
            return
        bucket.ready[k] = True
        bucket.pending -= 1
        if self._ready_order is not None:
            self._ready_order.append(index)
        if bucket.pending == 0:
            self._start_complete_buckets()

    def _start_complete_buckets(self) -> None:
        """Start every bucket from the next one on that is complete, in index order."""
        buckets = self._buckets
        while self._next_to_start < len(buckets) and buckets[self._next_to_start].pending == 0:
            self._start(self._next_to_start)
            self._next_to_start += 1

    def _start(self, b: int) -> None:
        bucket = self._buckets[b]
        if bucket.reduction.stream is not None:     # backward may run on another stream now
            bucket.reduction.bind(devices.current_stream(self._device))
        if self._comm_hook is None:
            bucket.reduction.start()
        else:
            bucket.future = self._comm_hook(self._hook_state, GradBucket(
                b, bucket.buffer, bucket.params, b == len(self._buckets) - 1))

    def _finish_backward(self) -> None:
        """End of backward: start what is left (unused parameters as zero gradients), wait
        for every bucket, then raise if a parameter got no gradient unexpectedly."""
        self._in_backward = False
        missing = []
        for bucket in self._buckets:
            for k, is_ready in enumerate(bucket.ready):
                if not is_ready:
                    missing.append(bucket.indices[k])
                    bucket.ready[k] = True
                    bucket.pending -= 1
                    param = bucket.params[k]
                    if param.grad is None:       # no gradient yet: it counts as zeros
                        bucket.views[k].zero_()
                        param.grad = bucket.views[k]
        if self._ready_order is not None:
            self._ready_order.extend(sorted(missing, reverse=True))
        self._start_complete_buckets()
        self._wait_for_buckets()
        for bucket in self._buckets:
            if bucket.future is not None:
                result = bucket.future.wait()
                if result is not bucket.buffer:
                    bucket.buffer.copy_(result)
        self._average_over_active_ranks()
        if missing and not self.find_unused_parameters:
            names = ", ".join(self._names[i] for i in sorted(missing))
            raise ReductionIncompleteError(
                f"parameters got no gradient in this backward: {names}. Their buckets were "
                f"averaged with zeros on this rank so no rank hangs; pass "
                f"find_unused_parameters=True if the model leaves them unused on purpose")

    def _wait_for_buckets(self) -> None:
        """Every started bucket's allreduce done: on the host, or for CUDA buckets ordered
        before whatever torch's current stream runs next (the host goes on)."""
        stream = devices.current_stream(self._device) if self._device.type == "cuda" else None
        for bucket in self._buckets:
            bucket.reduction.wait(stream)

    def _average_over_active_ranks(self) -> None:
        """Inside a join: the buckets were averaged over every rank, the joined ones giving
        zeros; rescale them to the ranks that took part, unless asked not to."""
        active, self._active_ranks = self._active_ranks, None
        if active is not None and 0 < active < self.comm.size and \
                not self._divide_by_initial_world_size:
            for bucket in self._buckets:
                bucket.buffer.mul_(self.comm.size / active)

    def _shadow_iteration(self) -> None:
        """A joined rank's part in an iteration of the others: the forward's collectives,
        then every bucket's allreduce (or comm hook) in index order, on zeros."""
        self._prepare_iteration(active=False)
        for b, bucket in enumerate(self._buckets):
            bucket.buffer.zero_()
            bucket.pending = 0
            self._start(b)
        self._next_to_start = len(self._buckets)
        self._wait_for_buckets()
        for bucket in self._buckets:
            if bucket.future is not None:
                bucket.future.wait()
        if self._ready_order is not None and len(self._ready_order) < len(self._params):
            # as if a backward had recorded an order, so the rebuild happens when the active
            # ranks' does (rank 0's order is broadcast: whatever this one holds is replaced)
            self._ready_order = list(reversed(range(len(self._params))))

    # -- set-up ------------------------------------------------------------------------------

    def _check_params(self) -> torch.device:
        """The device every parameter is on (CPU or one CUDA device), checked; and every
        rank's model the same size."""
        device = self._params[0].device if self._params else torch.device("cpu")
        for name, p in zip(self._names, self._params):
            if p.device.type not in ("cpu", "cuda"):
                raise TensorError(f"{name}: expected a CPU or CUDA parameter, got one on "
                                  f"{p.device}")
            if p.device != device:
                raise TensorError(f"{name}: expected every parameter on {device} (as "
                                  f"{self._names[0]}), got one on {p.device}")
            if p.dtype not in _NUMPY and p.dtype != torch.bfloat16:
                raise TensorError(f"{name}: expected a float32/64, float16 or bfloat16 "
                                  f"parameter, got {p.dtype}")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if self.comm.size == 1:
            return device
        mine = np.array([len(self._params), sum(p.numel() for p in self._params)], np.int64)
        lowest, highest = mine.copy(), mine.copy()
        al.allreduce(lowest, self.comm, op=al.MIN)
        al.allreduce(highest, self.comm, op=al.MAX)
        if not np.array_equal(lowest, highest):
            raise TensorError(f"module: ranks hold different models (parameter count, "
                              f"elements) from {lowest.tolist()} to {highest.tolist()}; this "
                              f"rank {mine.tolist()}")
        return device

    def _sync_from(self, tensors: list[torch.Tensor], root: int) -> None:
        """Copy rank ``root``'s values into ``tensors`` on every rank."""
        for tensor in tensors:
            data = tensor.data
            comm, where = devices.placement(self.comm, data)
            if data.is_contiguous():
                al.bcast(data, comm, root=root, **where)
            else:
                staged = data.contiguous()
                al.bcast(staged, comm, root=root, **where)
                data.copy_(staged)

    def _track_for_exit(self) -> None:
        """Close live wrappers at exit, before aluminum's own finalize (registered earlier,
        so run later) frees the shared memory the buckets live in."""
        global _atexit_registered
        _live.add(self)
        if not _atexit_registered:
            atexit.register(_close_all)
            _atexit_registered = True


class _JoinHook(JoinHook):
    """What torch's ``Join`` runs on a rank whose inputs have ended (see the module
    docstring)."""

    def __init__(self, ddp: DistributedDataParallel, divide_by_initial_world_size: bool) -> None:
        self.ddp = ddp
        ddp._divide_by_initial_world_size = divide_by_initial_world_size

    def main_hook(self) -> None:
        self.ddp._shadow_iteration()

    def post_hook(self, is_last_joiner: bool) -> None:
        """Every rank takes the parameters and buffers of the highest of the last ranks to
        join (they ran every iteration)."""
        ddp = self.ddp
        source = np.array([ddp.comm.rank if is_last_joiner else -1], np.int64)
        al.allreduce(source, ddp.comm, op=al.MAX)
        ddp._sync_from(list(ddp._params) + list(ddp.module.buffers()), int(source[0]))


def _close_all() -> None:
    for ddp in list(_live):
        ddp.close()
