"""One run of an SSA graph, out of order, shared by the calling thread and a pool.

Scheduling follows Paddle's fast threaded SSA executor: dependency counts (built once with
the graph) are copied each run; ops whose inputs are ready wait in a ready queue; a thread
that finishes an op continues with the first op it made ready, without a round trip through
the queue, and queues the rest; communication ops go to the front of the queue.  The first
error is kept, ops in flight finish, nothing new starts.

The calling thread takes any ready op; the pool's workers take only communication ops and
ops that took at least ``LARGE_OP_S`` in the previous run: handing a few-microsecond op to
another thread costs a 20-50 µs wake-up and a fight for the GIL, so a graph of small ops
runs on the caller alone while large independent ops (numpy releases the GIL in them)
overlap.

Every op runs on its stream (see streams.py).  An op launched on a stream that is not the
launching thread has finished, for the scheduler, once it is launched; its consumers on
other streams wait for the event it recorded.
"""
from __future__ import annotations

import collections
import threading
import time

from .errors import ExecutionError
from .executor import PreparedOp, fetch_value
from .ssa_graph import COMMUNICATION, FETCH, OpHandle, SSAGraph
from .streams import wait_for

LARGE_OP_S = 200e-6
_clock = time.perf_counter


class RunPlan:
    """What every run of one fetch list needs, made on its first run: the graph with its
    fetch ops, each op's stream and prepared kernel, the producers on other streams it
    waits for, whether it records an event for such consumers, and how long it took last
    time."""

    def __init__(self, graph: SSAGraph, streams: dict, scope, context) -> None:
        ops = graph.ops
        self.graph, self.scope = graph, scope
        self.streams = [streams[handle.stream] for handle in ops]
        self.prepared = [None if handle.kind == FETCH else
                         PreparedOp(handle.op, scope, handle.place, streams[handle.stream].name,
                                    context) for handle in ops]
        self.waits: list[tuple[int, ...]] = []
        self.records = [False] * len(ops)
        for handle in ops:
            mine = self.streams[handle.index]
            producers = sorted({v.generated_op.index for v in handle.inputs
                                if v.generated_op is not None})
            crossing = tuple(p for p in producers
                             if self.streams[p] is not mine and not self.streams[p].inline)
            self.waits.append(crossing)
            for producer in crossing:
                self.records[producer] = True
        # an op on the launching thread that neither waits nor records: the fast path
        self.plain = [self.streams[i].inline and not self.waits[i] and not self.records[i]
                      for i in range(len(ops))]
        self.fetches = sum(handle.kind == FETCH for handle in ops)
        self.queued_streams = list({id(s): s for s in self.streams if not s.inline}.values())
        self.seconds = [LARGE_OP_S] * len(ops)    # each op's last run time


class Run:
    """One run's state, shared by the caller and the pool's workers under ``lock``."""

    def __init__(self, plan: RunPlan, before_op, sync: str, lock: threading.Lock, caller_wakes: threading.Condition,
                 pool_wakes: threading.Condition) -> None:
        self.plan, self.scope, self.before_op, self.sync = plan, plan.scope, before_op, sync
        self.lock, self.caller_wakes, self.pool_wakes = lock, caller_wakes, pool_wakes
        graph = plan.graph
        self.pending = list(graph.dependency_counts)
        self.ready = collections.deque(graph.ops[i] for i, c in enumerate(self.pending)
                                       if c == 0)
        self.remaining = len(graph.ops)
        self.events: list = [None] * len(graph.ops)
        self.fetched: list = [None] * plan.fetches
        self.error: tuple[OpHandle, BaseException] | None = None
        self.helpers_busy = 0

    def wants_pool(self, handle: OpHandle) -> bool:
        """Whether a pool worker may take ``handle``: communication, or large last time."""
        return handle.kind == COMMUNICATION or self.plan.seconds[handle.index] >= LARGE_OP_S

    def take(self, caller: bool) -> OpHandle | None:
        """The next ready op this thread may run (under the lock), or None."""
        ready = self.ready
        if not ready or self.error is not None:
            return None
        if caller:
            return ready.popleft()
        for index, handle in enumerate(ready):
            if self.wants_pool(handle):
                del ready[index]
                return handle
        return None

    def work(self) -> None:
        """The caller's part: run ops until the graph is done or failed."""
        with self.lock:
            handle = self._next(caller=True)
        if handle is not None:
            self.chain(handle, caller=True)

    def _next(self, caller: bool) -> OpHandle | None:
        """Under the lock: the next op for this thread, or None.  The caller waits for one
        while ops remain and nothing failed; a pool worker does not wait."""
        if not caller:
            return self.take(caller=False)
        while self.remaining and self.error is None:
            handle = self.take(caller=True)
            if handle is not None:
                return handle
            self.caller_wakes.wait()
        return None

    def chain(self, handle: OpHandle, caller: bool) -> None:
        """Run ``handle``, then the first op each run makes ready, queueing the others."""
        plan, ops = self.plan, self.plan.graph.ops
        successors, seconds, plain, prepared = plan.graph.successors, plan.seconds, \
            plan.plain, plan.prepared
        before_op, pending, ready_queue, lock = self.before_op, self.pending, self.ready, \
            self.lock
        while handle is not None:
            index = handle.index
            try:
                if before_op is not None:
                    before_op(handle)
                started = _clock()
                if plain[index]:
                    prepared[index].run()
                else:
                    self._launch(handle)
                seconds[index] = _clock() - started
                failed = None
            except BaseException as exc:  # noqa: BLE001 - kept and re-raised by the caller
                failed = exc
            with lock:
                self.remaining -= 1
                if failed is not None:
                    if self.error is None:
                        self.error = (handle, failed)
                    self.caller_wakes.notify_all()
                    return
                following, queued, large = None, False, False
                for successor in successors[index]:
                    pending[successor] -= 1
                    if pending[successor]:
                        continue
                    ready = ops[successor]
                    if ready.kind == COMMUNICATION:
                        ready_queue.appendleft(ready)
                        queued = large = True
                    elif following is None:
                        following = ready
                    else:
                        ready_queue.append(ready)
                        queued = True
                        large = large or seconds[successor] >= LARGE_OP_S
                if not self.remaining or (queued and not caller):
                    self.caller_wakes.notify_all()
                if large:
                    self.pool_wakes.notify_all()
                if following is None:       # next from the queue, without leaving the lock
                    following = self._next(caller)
                if self.error is not None:
                    return
            handle = following

    def _launch(self, handle: OpHandle) -> None:
        """Run or launch an op that is not on the fast path: wait for its producers on
        other streams, launch it on its stream, record its event if others wait for it."""
        index, plan = handle.index, self.plan
        stream = plan.streams[index]
        if plan.waits[index]:
            self._wait_for_producers(handle, stream)
        if stream.inline:
            plan.prepared[index].run()
        else:
            stream.launch(self._run_launched, handle)
        if plan.records[index]:
            self.events[index] = stream.record_event()

    def _wait_for_producers(self, handle: OpHandle, stream) -> None:
        """Order ``handle`` after its producers on other streams (``sync``: by event or by
        a host wait); a producer's stream error is raised naming the producer."""
        ops = self.plan.graph.ops
        for producer in self.plan.waits[handle.index]:
            try:
                wait_for(self.events[producer], stream, self.sync)
            except BaseException as exc:  # noqa: BLE001 - named after the producer
                raise ExecutionError(f"op {ops[producer].op.type} on {handle.place} failed: "
                                     f"{type(exc).__name__}: {exc}") from exc

    def _run_launched(self, handle: OpHandle) -> None:
        """The work of an op launched on a stream, wherever the stream runs it; a failure is
        kept as the run's error."""
        try:
            if handle.kind == FETCH:
                self.fetched[handle.op.attrs["column"]] = fetch_value(
                    handle.op.inputs["X"][0], self.scope, handle.place, FETCH)
            else:
                self.plan.prepared[handle.index].run()
        except BaseException as exc:  # noqa: BLE001 - kept and re-raised by the caller
            with self.lock:
                if self.error is None:
                    self.error = (handle, exc)
                self.caller_wakes.notify_all()

    def finish(self) -> None:
        """Wait for the stream work the run launched (called once no op is left to start);
        a stream's own error becomes the run's error if it has none."""
        for stream in self.plan.queued_streams:
            try:
                stream.synchronize()
            except BaseException as exc:  # noqa: BLE001 - kept and re-raised by the caller
                if self.error is None:
                    self.error = (None, ExecutionError(
                        f"stream {stream.name} failed: {type(exc).__name__}: {exc}"))
