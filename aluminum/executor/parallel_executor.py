"""``ParallelExecutor``: a program's SSA graph run out of order on a thread pool.

Scheduling follows Paddle's fast threaded SSA executor: dependency counts (built once with
the graph) are copied each run; ops whose inputs are ready wait in a ready queue, taken by
``num_threads`` workers (the calling thread is one of them); a worker that finishes an op
continues with the first op it made ready, without a round trip through the queue, and
queues the rest; communication ops go to the front of the queue.  The first error is kept,
ops in flight finish, nothing new starts, and the error is raised naming the op and place.
numpy releases the GIL in large kernels, so independent branches of large ops overlap.
The calling thread takes any ready op; the pool's workers take (and are woken for) only
ops that took at least ``LARGE_OP_S`` in the previous run, and communication ops: handing a
few-microsecond op to another thread costs a 20-50 µs wake-up and a fight for the GIL, so a
graph of small ops runs on the caller alone while large independent ops overlap.

Out-of-order execution never changes a result: every op reads the versions the program
order gives it (the SSA graph's edges), and accumulations (``sum``) add in a fixed order.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

import aluminum as al

from .data_parallel import broadcast_parameters, check_ranks_agree, data_parallel_program
from .errors import ExecutionError, ProgramError
from .executor import check_feed, check_fetch, check_readable, fetch_names, run_op
from .ir import Program
from .parallel_context import get_parallel_context
from .places import merge_fetch, split_feed
from .scope import Scope, global_scope
from .ssa_graph import COMMUNICATION, OpHandle, SSAGraph, build_graph

LARGE_OP_S = 200e-6
_clock = time.perf_counter


@dataclass
class ExecutionStrategy:
    """``num_threads``: workers, the caller included.  ``before_op``: called with each op
    handle just before it runs, on its worker (tests inject random delays with it)."""

    num_threads: int = 2
    before_op: Callable[[OpHandle], None] | None = None


@dataclass
class BuildStrategy:
    """Options of the graph build.  With a communicator: ``gradient_scale``
    ("coeff_num_device": the loss gradient times 1/ranks, "one", "customized": fed as
    ``<loss>@GRAD``), ``broadcast_parameters`` (rank 0's persistable variables copied to
    every rank when the executor is made), ``overlap`` (False: allreduce only after the
    whole backward pass), ``fuse_all_reduce_ops`` with ``fuse_grad_size_mb`` and
    ``first_bucket_mb``, ``reduce_strategy`` ("all_reduce", or "reduce": each gradient
    reduced to one owner rank, which alone updates that parameter and broadcasts it; see
    data_parallel.py)."""

    debug_graphviz_path: str | None = None
    gradient_scale: str = "coeff_num_device"
    broadcast_parameters: bool = True
    overlap: bool = True
    fuse_all_reduce_ops: bool = False
    fuse_grad_size_mb: float = 32.0
    first_bucket_mb: float = 1.0
    reduce_strategy: str = "all_reduce"


class _Context:
    """What kernels get beyond their inputs: the communicator, and the fusion buckets
    (memory and persistent allreduce plan, made once per bucket)."""

    def __init__(self, comm) -> None:
        self.comm = comm
        self._buckets: dict[int, tuple] = {}

    def bucket(self, index: int, count: int, dtype, root: int | None = None) -> tuple:
        """Bucket ``index``'s memory and its plan: an allreduce, or with ``root`` a reduce
        to that rank."""
        found = self._buckets.get(index)
        if found is None or found[0].size != count or found[0].dtype != dtype:
            memory = al.shared_empty(count, dtype, self.comm) \
                if self.comm.local_size == self.comm.size else np.empty(count, dtype)
            plan = al.allreduce_init(memory, self.comm) if root is None else \
                al.reduce_init(memory, self.comm, root=root)
            found = self._buckets[index] = (memory, plan)
        return found

    def release(self, scope: Scope) -> None:
        """Let the buckets go: variables of ``scope`` that are views of one (the reduced
        gradients of the last step) become copies, and the plans are freed, so that the
        communicator can give the buckets' shared memory back when it is freed."""
        buckets, self._buckets = self._buckets, {}
        for memory, plan in buckets.values():
            plan.free()
            for name, value in list(scope.items()):
                if isinstance(value, np.ndarray) and np.may_share_memory(value, memory):
                    scope[name] = value.copy()


class ParallelExecutor:
    """Run ``main_program`` out of order; ``run(fetch_list, feed)`` as Paddle's."""

    def __init__(self, main_program: Program, loss_name: str | None = None,
                 places: list[str] | None = None, build_strategy: BuildStrategy | None = None,
                 exec_strategy: ExecutionStrategy | None = None,
                 scope: Scope | None = None, comm=None) -> None:
        """``places``: the places of this process (``["cpu:0", "cpu:1"]``); with more than
        one, each fed batch is split over them, every place runs the forward and backward
        ops on its part side by side, and gradients are summed over the places before
        anything else (places.py; fetched per-place values come back concatenated).
        ``comm``: an aluminum communicator to train data-parallel over its ranks (each
        feeds its own shard of the batch; see data_parallel.py); None runs one rank, unless
        ``set_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL)`` said otherwise
        (then its communicator, and without a ``build_strategy`` its ``gradients_mean``)."""
        if comm is None:
            context = get_parallel_context()
            comm = context.communicator()
            if comm is not None and build_strategy is None:
                build_strategy = BuildStrategy(
                    gradient_scale="coeff_num_device" if context.gradients_mean else "one")
        build = build_strategy or BuildStrategy()
        self.loss_name = loss_name
        self.places = list(places or ["cpu"])
        self.place = self.places[0]
        self.exec_strategy = exec_strategy or ExecutionStrategy()
        self.scope = global_scope() if scope is None else scope
        self._context = _Context(comm)
        if comm is not None or len(self.places) > 1:
            if loss_name is None:
                raise ProgramError("loss_name: data-parallel training needs the loss "
                                   "variable's name")
            ranks = 1 if comm is None else comm.size
            main_program = data_parallel_program(
                main_program, loss_name, ranks * len(self.places), build.gradient_scale,
                build.overlap, build.fuse_grad_size_mb if build.fuse_all_reduce_ops else None,
                build.first_bucket_mb, build.reduce_strategy, 0 if comm is None else comm.rank,
                len(self.places), across_ranks=comm is not None)
        if comm is not None:
            check_ranks_agree(main_program, comm)
            if build.broadcast_parameters:
                broadcast_parameters(main_program, self.scope, comm)
            self.place = f"{self.place}@rank{comm.rank}"
        self.program = main_program
        self.graph: SSAGraph = build_graph(main_program, self.place)
        if build.debug_graphviz_path:
            with open(build.debug_graphviz_path, "w", encoding="utf-8") as out:
                out.write(self.graph.to_dot())
        self._seconds = [LARGE_OP_S] * len(self.graph.ops)   # each op's last run time
        self._lock = threading.Lock()
        self._caller_wakes = threading.Condition(self._lock)
        self._pool_wakes = threading.Condition(self._lock)
        self._current: _Run | None = None
        self._closing = False
        self._workers = [threading.Thread(target=self._serve, name=f"al-executor-{i}",
                                          daemon=True)
                         for i in range(max(1, self.exec_strategy.num_threads) - 1)]
        for worker in self._workers:
            worker.start()

    def run(self, fetch_list=None, feed: dict | None = None) -> list[np.ndarray]:
        """Run the graph once; return copies of the fetched values (checked first)."""
        feed = split_feed(self.program, dict(feed or {}), len(self.places))
        names = fetch_names(fetch_list)
        check_feed(self.program, feed)
        check_fetch(self.program, names)
        scope = self.scope
        for name in self.graph.external_inputs:
            if name not in feed and name not in scope:
                check_readable(self.program, feed, scope)   # raises, naming the reader
        self.scope.update({name: np.asarray(value) for name, value in feed.items()})
        run = _Run(self.graph, self.scope, self.exec_strategy.before_op, self._seconds,
                   self._caller_wakes, self._pool_wakes, self._context)
        with self._lock:
            self._current = run
            if any(h.kind == COMMUNICATION or self._seconds[h.index] >= LARGE_OP_S
                   for h in run.ready):
                self._pool_wakes.notify_all()
        try:
            run.work()
        finally:
            with self._lock:
                while run.helpers_busy:           # ops in flight on the pool finish first
                    self._caller_wakes.wait()
                self._current = None
        if run.error is not None:
            handle, exc = run.error
            if isinstance(exc, ExecutionError):
                raise exc
            raise ExecutionError(f"op {handle.op.type} on {handle.place} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        return [merge_fetch(self.program, self.scope, name, len(self.places))
                for name in names]

    def _serve(self) -> None:
        """A pool worker: run the large ops of whichever run is current."""
        while True:
            with self._lock:
                while True:
                    if self._closing:
                        return
                    run = self._current
                    handle = None if run is None else run.take(caller=False)
                    if handle is not None:
                        run.helpers_busy += 1
                        break
                    self._pool_wakes.wait()
            try:
                run.chain(handle, caller=False)
            finally:
                with self._lock:
                    run.helpers_busy -= 1
                    if not run.helpers_busy:
                        self._caller_wakes.notify_all()

    def close(self) -> None:
        """Stop the pool's workers and let go of the communication buckets (idempotent);
        the executor cannot run afterwards."""
        with self._lock:
            self._closing = True
            self._pool_wakes.notify_all()
        self._context.release(self.scope)

    def __del__(self) -> None:
        if hasattr(self, "_lock"):
            self.close()


class _Run:
    """One run's state, shared by the caller and the pool's workers under one lock."""

    def __init__(self, graph: SSAGraph, scope: Scope, before_op, seconds: list,
                 caller_wakes: threading.Condition, pool_wakes: threading.Condition,
                 context) -> None:
        self.graph, self.scope, self.before_op = graph, scope, before_op
        self.context = context
        self.seconds = seconds
        self.pending = list(graph.dependency_counts)
        self.ready = collections.deque(graph.ops[i] for i, c in enumerate(self.pending)
                                       if c == 0)
        self.remaining = len(graph.ops)
        self.error: tuple[OpHandle, BaseException] | None = None
        self.helpers_busy = 0
        self.caller_wakes, self.pool_wakes = caller_wakes, pool_wakes

    def take(self, caller: bool) -> OpHandle | None:
        """The next ready op this worker may run (under the lock), or None: the caller
        takes any, the pool only communication ops and ops large last time."""
        ready = self.ready
        if not ready or self.error is not None:
            return None
        if caller:
            return ready.popleft()
        for index, handle in enumerate(ready):
            if handle.kind == COMMUNICATION or self.seconds[handle.index] >= LARGE_OP_S:
                del ready[index]
                return handle
        return None

    def work(self) -> None:
        """The caller's loop: take and run ready ops until the graph is done or failed."""
        wakes = self.caller_wakes
        while True:
            with wakes:
                while True:
                    if not self.remaining or self.error is not None:
                        return
                    handle = self.take(caller=True)
                    if handle is not None:
                        break
                    wakes.wait()
            self.chain(handle, caller=True)

    def chain(self, handle: OpHandle, caller: bool) -> None:
        """Run ``handle``, then the first op each run makes ready, queueing the others."""
        ops, successors, seconds = self.graph.ops, self.graph.successors, self.seconds
        while handle is not None:
            try:
                if self.before_op is not None:
                    self.before_op(handle)
                started = _clock()
                run_op(handle.op, self.scope, handle.place, handle.stream, self.context)
                seconds[handle.index] = _clock() - started
                failed = None
            except BaseException as exc:  # noqa: BLE001 - kept and re-raised by run()
                failed = exc
            with self.caller_wakes:
                self.remaining -= 1
                if failed is not None:
                    if self.error is None:
                        self.error = (handle, failed)
                    self.caller_wakes.notify_all()
                    return
                following, queued, large = None, False, False
                for index in successors[handle.index]:
                    self.pending[index] -= 1
                    if self.pending[index]:
                        continue
                    ready = ops[index]
                    if ready.kind == COMMUNICATION:
                        self.ready.appendleft(ready)
                        queued = large = True
                    elif following is None:
                        following = ready
                    else:
                        self.ready.append(ready)
                        queued = True
                        large = large or seconds[index] >= LARGE_OP_S
                if not self.remaining or (queued and not caller):
                    self.caller_wakes.notify_all()
                if large:
                    self.pool_wakes.notify_all()
                handle = following
