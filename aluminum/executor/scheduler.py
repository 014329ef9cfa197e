"""Running an SSA graph out of order: one ``Run`` per call, shared by the calling thread and
a ``WorkerPool``.

Scheduling follows Paddle's fast threaded SSA executor: per-op dependency counts (built
once with the graph) are set up each run; a thread that finishes an op continues with the
first op it made ready, without a round trip through a queue, and queues the rest;
communication ops go to the front.  The first error is kept, ops in flight finish, nothing
new starts.

Two queues: ``pool_ready`` holds communication ops and ops that were large when last
timed (``LARGE_OP_S``), which the pool's workers take (and are woken for); ``ready`` holds
the small ones, which only the caller takes.  Handing a few-microsecond op to another
thread costs a 20-50 µs wake-up and a fight for the GIL, so a graph of small ops runs on
the caller alone while large independent ops (numpy releases the GIL in them) overlap.
The caller takes ``pool_ready`` first, then ``ready``.

The hot path takes no lock: the queues are deques, an op with several producers counts
them down by popping tokens off a list (``list.pop`` is atomic: whoever pops the last
token made it ready), and so is the count of unfinished ops.  A thread sleeps only under
the pool's lock after saying so (``caller_sleeping``, ``WorkerPool.sleepers``) and
checking the queues again, and whoever queues an op reads that flag after queueing, so no
wake-up is lost.

Every op runs on its stream (see streams.py).  An op launched on a stream that is not the
launching thread has finished, for the scheduler, once it is launched; its consumers on
other streams wait for the event it recorded.
"""
from __future__ import annotations

import collections
import threading
import time

from .errors import ExecutionError
from .executor import fetch_value
from .run_plan import LARGE_OP_S, RunPlan
from .ssa_graph import COMMUNICATION, FETCH, OpHandle
from .streams import wait_for

_clock = time.perf_counter
CLOSE_WAIT_S = 10.0   # how long close() waits for a worker still finishing an op


class WorkerPool:
    """``size`` daemon threads that run the pool's ops of whichever run is current."""

    def __init__(self, size: int) -> None:
        self.lock = threading.Lock()
        self.wakes = threading.Condition(self.lock)          # workers wait here
        self.caller_wakes = threading.Condition(self.lock)   # the caller waits here
        self.sleepers = 0
        self.current: Run | None = None
        self.closing = False
        self.threads = [threading.Thread(target=self._serve, name=f"al-executor-{i}",
                                         daemon=True) for i in range(size)]
        for thread in self.threads:
            thread.start()

    def wake(self) -> None:
        """Wake one sleeping worker, if any sleeps (call after queueing a pool op)."""
        if self.sleepers:
            with self.lock:
                self.wakes.notify()

    def _serve(self) -> None:
        while True:
            with self.lock:
                while True:
                    if self.closing:
                        return
                    self.sleepers += 1      # before looking: see the module docstring
                    run = self.current
                    handle = None if run is None or run.error is not None \
                        else run.take_for_pool()
                    if handle is not None:
                        self.sleepers -= 1
                        run.helpers_busy += 1
                        break
                    run = None   # (asleep, hold no run: its ops hold the buckets' views)
                    self.wakes.wait()
                    self.sleepers -= 1
            try:
                run.chain(handle, caller=False)
            finally:
                with self.lock:
                    run.helpers_busy -= 1
                    if not run.helpers_busy:
                        run.caller_wakes.notify_all()

    def close(self) -> None:
        """Stop the workers and wait for them to end (idempotent), so that nothing of
        the last run (its ops, the buckets they view) outlives the call."""
        with self.lock:
            self.closing = True
            self.wakes.notify_all()
        me = threading.current_thread()
        for thread in self.threads:
            if thread is not me:
                thread.join(CLOSE_WAIT_S)


class Run:
    """One run of a plan: the caller calls ``work()``, then ``finish()``."""

    def __init__(self, plan: RunPlan, before_op, sync: str, pool: WorkerPool) -> None:
        self.plan, self.scope, self.before_op, self.sync = plan, plan.scope, before_op, sync
        self.pool, self.lock, self.caller_wakes = pool, pool.lock, pool.caller_wakes
        self.caller_sleeping = False
        self.timed = plan.next_run_is_timed()
        ops = plan.graph.ops
        self.countdowns: list = [None] * len(ops)
        for index, count in plan.joins:
            self.countdowns[index] = [True] + [False] * (count - 1)
        self.unfinished = [False] * len(ops)
        if ops:
            self.unfinished[0] = True
        self.done = not ops
        self.ready: collections.deque = collections.deque()
        self.pool_ready: collections.deque = collections.deque()
        for handle in plan.starts:
            self._queue(handle)
        self.events: list = [None] * len(ops)
        self.fetched: list = [None] * plan.fetches
        self.error: tuple[OpHandle | None, BaseException] | None = None
        self.helpers_busy = 0

    def _queue(self, handle: OpHandle) -> bool:
        """Queue a ready op; True if it went to ``pool_ready``."""
        if handle.kind == COMMUNICATION:
            self.pool_ready.appendleft(handle)
        elif self.plan.seconds[handle.index] >= LARGE_OP_S:
            self.pool_ready.append(handle)
        else:
            self.ready.append(handle)
            return False
        return True

    def take_for_pool(self) -> OpHandle | None:
        try:
            return self.pool_ready.popleft()
        except IndexError:
            return None

    def work(self) -> None:
        """The caller's part: run ops until the graph is done or failed."""
        for _ in range(len(self.pool_ready)):
            self.pool.wake()
        handle = self._next_for_caller()
        if handle is not None:
            self.chain(handle, caller=True)

    def _next_for_caller(self) -> OpHandle | None:
        """The caller's next op (``pool_ready`` first), waiting for one while ops remain and
        nothing failed; None when the run is over."""
        while True:
            queue = self.pool_ready or self.ready
            if queue:
                try:
                    return queue.popleft()
                except IndexError:   # a pool worker took it
                    continue
            if self.done or self.error is not None:
                return None
            with self.lock:
                self.caller_sleeping = True
                if not (self.pool_ready or self.ready or self.done or self.error):
                    self.caller_wakes.wait()
                self.caller_sleeping = False

    def _wake_caller(self) -> None:
        if self.caller_sleeping:
            with self.lock:
                self.caller_wakes.notify_all()

    def chain(self, handle: OpHandle, caller: bool) -> None:
        """Run ``handle``, then the first op each run makes ready, queueing the others."""
        plan, ops = self.plan, self.plan.graph.ops
        successors, seconds, plain, prepared = plan.graph.successors, plan.seconds, \
            plan.plain, plan.prepared
        before_op, countdowns, unfinished, timed = self.before_op, self.countdowns, \
            self.unfinished, self.timed
        while handle is not None:
            index = handle.index
            try:
                if before_op is not None:
                    before_op(handle)
                if timed:
                    started = _clock()
                if plain[index]:
                    prepared[index].run()
                else:
                    self._launch(handle)
                if timed:
                    seconds[index] = _clock() - started
            except BaseException as exc:  # noqa: BLE001 - kept and re-raised by the caller
                self._fail(handle, exc)
                return
            following, queued = None, False
            for successor in successors[index]:
                tokens = countdowns[successor]
                if tokens is not None and not tokens.pop():
                    continue                     # other producers still to finish
                ready = ops[successor]
                if following is None and ready.kind != COMMUNICATION:
                    following = ready
                else:
                    queued = True
                    if self._queue(ready):
                        self.pool.wake()
            if unfinished.pop():                 # the run's last op
                self.done = True
                self._wake_caller()
                return
            if queued and not caller:
                self._wake_caller()
            if self.error is not None:
                return
            if following is None:
                following = self._next_for_caller() if caller else self.take_for_pool()
            handle = following

    def _fail(self, handle: OpHandle | None, exc: BaseException) -> None:
        """Keep the first error and wake the caller."""
        with self.lock:
            if self.error is None:
                self.error = (handle, exc)
            self.caller_wakes.notify_all()

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
            self._fail(handle, exc)

    def finish(self) -> None:
        """Wait for the pool's ops in flight, then for the stream work the run launched; a
        stream's own error becomes the run's error if it has none."""
        if self.helpers_busy:   # once done or failed, no worker takes another op
            with self.lock:
                while self.helpers_busy:
                    self.caller_wakes.wait()
        for stream in self.plan.queued_streams:
            try:
                stream.synchronize()
            except BaseException as exc:  # noqa: BLE001 - kept and re-raised by the caller
                if self.error is None:
                    self.error = (None, ExecutionError(
                        f"stream {stream.name} failed: {type(exc).__name__}: {exc}"))
