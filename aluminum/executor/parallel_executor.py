"""``ParallelExecutor``: a program's SSA graph run out of order on a thread pool.

The graph is built once; each fetch list gets its plan (the graph plus its fetch ops, each
op's stream and cross-stream waits) on its first run, reused after.  Scheduling, the pool's
policy and the error rules are in scheduler.py; streams and their waits in streams.py.

Out-of-order execution never changes a result: every op reads the versions the program
order gives it (the SSA graph's edges, and the events between streams), and accumulations
(``sum``) add in a fixed order.
"""
from __future__ import annotations

import os
from dataclasses import KW_ONLY, dataclass
from typing import Callable

import numpy as np

from .buckets import Buckets, gradient_destinations
from .data_parallel import broadcast_parameters, check_ranks_agree, data_parallel_program
from .errors import ExecutionError, ProgramError
from .executor import check_feed, check_fetch, check_readable, fetch_names, store_feed
from .ir import Program
from .nan_inf import check_feed_finite, check_plan_outputs
from .parallel_context import ParallelMode, get_parallel_context
from .places import fetch_on_places, merge_fetched, split_feed
from .program_check import check_program
from .run_plan import RunPlan
from .scheduler import Run, WorkerPool
from .scope import Scope, global_scope
from .ssa_graph import OpHandle, SSAGraph, build_graph
from .streams import SYNC_MODES, make_streams, uses_cupy


@dataclass
class ExecutionStrategy:
    """How a graph runs.  ``num_threads``: workers, the caller included; None (the
    default): ``default_threads(comm)``, 2 where every rank on the node has a second core,
    else 1: a second thread on a rank's only core takes turns with the first (and its
    GIL) instead of overlapping communication with computation, and costs a wake-up per
    handoff.  ``sync``: how an
    op waits for a producer on another stream: ``"event"`` (its stream waits for the
    producer's event, the host goes on) or ``"wait"`` (the host blocks until the producer's
    stream has run it); see streams.py.  ``before_op``: called with each op handle just
    before it runs, on its worker (tests inject random delays with it).  ``check_nan_inf``:
    check every float feed and every op's float outputs for NaN and Inf, naming the first
    op found (see nan_inf.py); off by default, and then it costs nothing."""

    num_threads: int | None = None
    _: KW_ONLY
    sync: str = "event"
    before_op: Callable[[OpHandle], None] | None = None
    check_nan_inf: bool = False

    def __post_init__(self) -> None:
        if self.sync not in SYNC_MODES:
            raise ProgramError(f"sync: expected one of {', '.join(SYNC_MODES)}, got "
                               f"{self.sync!r}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ProgramError(f"num_threads: expected at least 1, got {self.num_threads}")


def cores_per_rank(comm=None) -> float:
    """The cores this process may run on, shared out among ``comm``'s ranks on this node
    (``comm.local_size``; None: a lone process has them all)."""
    local = 1 if comm is None else getattr(comm, "local_size", 1)
    return len(os.sched_getaffinity(0)) / local


def default_threads(comm=None) -> int:
    """``ExecutionStrategy.num_threads`` where none is given, for a rank of ``comm``: 2
    where it has a core to spare (``cores_per_rank`` at least 2), else 1."""
    return 2 if cores_per_rank(comm) >= 2 else 1


@dataclass
class BuildStrategy:
    """Options of the graph build.  With a communicator: ``gradient_scale``
    ("coeff_num_device": the loss gradient times 1/ranks, "one", "customized": fed as
    ``<loss>@GRAD``, "samples": each rank and place weighted by its number of samples,
    exact full-batch training for uneven shards, see data_parallel.py),
    ``broadcast_parameters`` (rank 0's persistable variables copied to every rank when the
    executor is made), ``overlap`` (False: allreduce only after the whole backward pass),
    ``fuse_all_reduce_ops`` with ``fuse_grad_size_mb`` and ``first_bucket_mb`` (a sharded
    program's parameter-gradient sums over every rank too, ``sharding.fuse_gradient_sums``),
    ``reduce_strategy`` ("all_reduce", or "reduce": each gradient reduced to one owner
    rank, which alone updates that parameter and broadcasts it; see data_parallel.py),
    ``gradients_in_buckets`` (True: the op finishing a gradient writes it straight into its
    allreduce bucket, on numpy arrays; False: each allreduce copies its gradients in, the
    way to compare; see buckets.py)."""

    debug_graphviz_path: str | None = None
    gradient_scale: str = "coeff_num_device"
    broadcast_parameters: bool = True
    overlap: bool = True
    fuse_all_reduce_ops: bool = False
    fuse_grad_size_mb: float = 32.0
    first_bucket_mb: float = 1.0
    reduce_strategy: str = "all_reduce"
    gradients_in_buckets: bool = True


class _Context:
    """What kernels get beyond their inputs: the communicator and the reduction buckets."""

    def __init__(self, comm) -> None:
        self.comm = comm
        self.buckets = Buckets(comm)


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
        (then its communicator, and without a ``build_strategy`` its ``gradients_mean``).
        The whole program is checked first (``check_program``): nothing runs or is
        broadcast for a program that cannot run."""
        check_program(main_program)
        context = get_parallel_context()
        if comm is None:
            comm = context.communicator()
            if comm is not None and build_strategy is None:
                build_strategy = BuildStrategy(
                    gradient_scale="coeff_num_device" if context.gradients_mean else "one")
        build = build_strategy or BuildStrategy()
        self._in_buckets = build.gradients_in_buckets
        self.loss_name = loss_name
        self.places = list(places or ["cpu"])
        self.place = self.places[0]
        self.exec_strategy = exec_strategy or ExecutionStrategy()
        self.scope = global_scope() if scope is None else scope
        self._context = _Context(comm)
        self._placed = None
        self._sharded_rank = None
        if getattr(main_program, "sharding", None) is None and comm is not None and \
                context.parallel_mode is ParallelMode.SEMI_AUTO_PARALLEL:
            from .sharding import shard_program
            main_program = shard_program(main_program, comm, loss_name)
        if getattr(main_program, "sharding", None) is None and comm is not None and \
                context.parallel_mode is ParallelMode.AUTO_PARALLEL:
            from .sharding.auto import auto_parallel_program
            main_program = auto_parallel_program(
                main_program, comm, loss_name, context.cost_model, context.max_memory_mb,
                (build.first_bucket_mb, build.fuse_grad_size_mb)
                if build.fuse_all_reduce_ops else None,
                context.strategy_ckpt_load_file, context.strategy_ckpt_save_file)
        if getattr(main_program, "sharding", None) is not None:   # sharding/: tensor parallel
            from .sharding import fuse_gradient_sums, local_scope
            if build.fuse_all_reduce_ops:
                main_program = fuse_gradient_sums(main_program, build.fuse_grad_size_mb,
                                                  build.first_bucket_mb)
            comm = self._context.comm = comm or main_program.sharding.comm
            if len(self.places) > 1:
                raise ProgramError(f"places: a sharded program runs one place per rank, got "
                                   f"{self.places}")
            self._sharded_rank = comm.rank
            local_scope(main_program, self.scope, comm.rank)
        elif getattr(main_program, "cluster", None) is not None:   # placed: placement/
            from .placement.runtime import PlacedRun
            if len(self.places) > 1:
                raise ProgramError(f"places: a placed program runs one place per rank, got "
                                   f"{self.places}")
            self._placed = PlacedRun(main_program, comm, build.gradient_scale)
            self._placed.prepare(self.scope)
            self._context.placement = self._placed
            self._context.comm = comm = self._placed.comm
            main_program = self._placed.program
        elif comm is not None or len(self.places) > 1:
            if loss_name is None:
                raise ProgramError("loss_name: data-parallel training needs the loss "
                                   "variable's name")
            ranks = 1 if comm is None else comm.size
            main_program = data_parallel_program(
                main_program, loss_name, ranks * len(self.places), build.gradient_scale,
                build.overlap, build.fuse_grad_size_mb if build.fuse_all_reduce_ops else None,
                build.first_bucket_mb, build.reduce_strategy, 0 if comm is None else comm.rank,
                len(self.places), across_ranks=comm is not None)
        if comm is not None and self._placed is None and self._sharded_rank is None:
            check_ranks_agree(main_program, comm)
            if build.broadcast_parameters:
                broadcast_parameters(main_program, self.scope, comm)
        if comm is not None:
            self.place = f"{self.place}@rank{comm.rank}"
        self.program = main_program
        self.graph: SSAGraph = build_graph(main_program, self.place)
        if build.debug_graphviz_path:
            with open(build.debug_graphviz_path, "w", encoding="utf-8") as out:
                out.write(self.graph.to_dot())
        self._plans: dict[tuple, RunPlan] = {}
        self._streams: dict | None = None          # made on the first run
        self._destinations: dict = {}               # by op index, on the first run
        threads = self.exec_strategy.num_threads or default_threads(comm)
        self._pool = WorkerPool(threads - 1)

    def run(self, fetch_list=None, feed: dict | None = None) -> list[np.ndarray]:
        """Run the graph once; return numpy copies of the fetched values (everything is
        checked before the first op runs; per-place values concatenated).  Returns once the
        work every stream was given has run, so the scope holds this run's values.  Placed:
        None for a fetched value this rank does not hold."""
        if self._placed is not None:
            return self._placed.run(lambda local: self._run(local, feed),
                                    fetch_names(fetch_list))
        return self._run(fetch_list, feed)

    def _run(self, fetch_list, feed: dict | None) -> list[np.ndarray]:
        feed = dict(feed or {})
        if self._sharded_rank is not None:
            from .sharding import local_feed
            feed = local_feed(self.program, feed, self._sharded_rank)
        check_feed(self.program, feed, self._sharded_rank)   # before the split (arrays only)
        if self.exec_strategy.check_nan_inf:
            check_feed_finite(feed)
        feed = split_feed(self.program, feed, len(self.places))
        names = fetch_names(fetch_list)
        groups = fetch_on_places(self.program, names, len(self.places))
        check_fetch(self.program, names)
        scope = self.scope
        for name in self.graph.external_inputs:
            if name not in feed and name not in scope:
                check_readable(self.program, feed, scope)   # raises, naming the reader
        store_feed(scope, feed)
        run = Run(self._plan([name for group in groups for name in group], feed),
                  self.exec_strategy.before_op,
                  self.exec_strategy.sync, self._pool)
        self._pool.current = run        # a worker that missed it is woken for its first op
        try:
            run.work()
        finally:
            run.finish()
            self._pool.current = None
        if run.error is not None:
            handle, exc = run.error
            if isinstance(exc, ExecutionError):
                raise exc
            raise ExecutionError(f"op {handle.op.type} on {handle.place} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        return merge_fetched(groups, run.fetched)

    def _plan(self, names: list[str], feed: dict) -> RunPlan:
        """The plan of this fetch list (made on its first run; streams on the first run of
        all, cupy ones when the fed or scope arrays are cupy arrays, and then, on numpy
        arrays, the buckets and the gradients' destinations in them)."""
        plan = self._plans.get(tuple(names))
        if plan is None or plan.scope is not self.scope:
            if self._streams is None:
                on_gpu = uses_cupy(feed.values()) or uses_cupy(self.scope.values())
                self._streams = make_streams(self._context.comm, on_gpu)
                if self._context.comm is not None and self._in_buckets and not on_gpu:
                    self._destinations = gradient_destinations(
                        self.graph, self.program.global_block(), self._context.buckets)
            graph = self.graph.with_fetches(names) if names else self.graph
            plan = self._plans[tuple(names)] = RunPlan(graph, self._streams, self.scope,
                                                        self._context, self._destinations)
            if self.exec_strategy.check_nan_inf:
                check_plan_outputs(plan, self.places)
        return plan

    def close(self) -> None:
        """Stop the pool's workers, close the executor's own streams and let go of the
        communication buckets (idempotent); the executor cannot run afterwards."""
        self._pool.close()
        for stream in (self._streams or {}).values():
            if hasattr(stream, "close"):
                stream.close()
        self._plans, self._destinations = {}, {}   # their ops hold views of the buckets
        self._context.buckets.release(self.scope)
        if self._placed is not None:
            self._placed.release(self.scope)

    def __del__(self) -> None:
        if hasattr(self, "_pool"):
            self.close()
