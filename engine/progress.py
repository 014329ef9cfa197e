"""The progress engine: one daemon thread per process that drives ``State`` objects.

Semantics (../shared/DESIGN.md §2, after Aluminum's ``progress.cpp``):

- ``submit(state)`` appends a ``Request`` to one input deque (``deque.append`` is atomic, so
  any number of threads submit with no Python lock) and starts the engine thread on first use.
- Admission is FIFO per compute stream (``state.compute_stream``): only the head of a
  stream's queue is considered, so operations on one stream start in submission order.
  Host-only states (``compute_stream`` None) are queued per communicator (``state.comm``;
  None without one): each communicator is its own "host stream".  One queue for all host
  operations would deadlock threads that use different communicators: rank 0 could fill
  the bound with comm A's operations while rank 1 fills it with comm B's, each waiting for
  operations the other rank has queued behind them.
- A BOUNDED state is admitted while fewer than ``AL_PE_NUM_CONCURRENT_OPS`` bounded states
  run, or whenever its stream has nothing running; an UNBOUNDED state is always admitted (a
  send posted before its receive must not block it).
- Each stream has pipeline stages; an admitted state is started and enters stage 0, and each
  pass steps every running state once.  ``ADVANCE`` moves a state to the next stage only from
  the head of its stage; a state behind the head is parked (not stepped) until it is the head.
- A state whose ``start``/``step`` raises fails only its own request.

The driver token and the GIL.  Two busy Python threads in one process starve each other: a
thread that lost the GIL gets it back at the other's next blocking call, or after the 5 ms
switch interval, and being woken costs it 20-50 µs here.  So exactly one thread runs engine
passes at a time, whoever holds ``_driver``:

- A thread in ``Request.wait`` takes the token when it is free and drives until its request
  is done (like ``MPI_Wait`` progressing MPI): a short operation completes with no thread
  handoff at all.  ``Request.test`` runs one pass.  Such callers drive every queued
  operation, not only their own.
- The engine thread drives when no caller does: operations nobody waits on progress in the
  background.  Finding the token held, it concludes that callers drive and, once idle,
  naps (``NAP_S`` at a time, not woken by submissions) instead of sleeping until the next
  submission wakes it, until ``LAZY_S`` passes without submissions or it finds work nobody
  drove: a submission nobody waits for starts at most ``NAP_S`` late, and then the engine
  is woken by submissions again.
- Waiting is spin, then yield, then sleep.  While passes change nothing, a driving waiter
  spins ``AL_PE_SPIN_US``, then yields every ``YIELD_EVERY_S`` up to ``WAIT_YIELD_S``, then
  sleeps ``BACKOFF_S`` between passes; the engine thread yields for ``AL_PE_SPIN_US``, then
  sleeps ``BACKOFF_S`` between passes (a submission wakes it).  An idle engine spins
  ``AL_PE_SPIN_US``, then naps or sleeps.  Yielding is ``os.sched_yield()``, which lets
  threads waiting for the GIL take it (numpy in other threads keeps its speed), unlike a bare
  loop; ``time.sleep(0)`` would sleep ~100 µs on these machines.
"""
from __future__ import annotations

import atexit
import collections
import itertools
import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Callable

from .. import runtime, trace
from ..errors import CommunicatorError, OperationError, TimeoutError
from .request import Request
from .state import Action, RunType, State

__all__ = ["EngineConfig", "ProgressEngine", "drive_until", "get_engine", "shutdown", "submit"]

DEFAULT_CONCURRENT_OPS = 4
DEFAULT_SPIN_US = 100.0
DEFAULT_FINALIZE_TIMEOUT_S = 30.0
WAIT_YIELD_S = 2e-3   # a waiter driving a stalled operation yields this long, then backs off
YIELD_EVERY_S = 50e-6  # ...yielding the GIL this often
# A busy engine whose passes have changed nothing for AL_PE_SPIN_US sleeps this long between
# passes (a submission still wakes it at once): on oversubscribed cores polling an operation
# that waits for a slow peer would otherwise take CPU time from the peer and from compute.
BACKOFF_S = 50e-6
# While callers drive their own operations the idle engine naps NAP_S at a time instead of
# being woken by each submission, and sleeps for good after LAZY_S without submissions.
NAP_S = 1e-3
LAZY_S = 20e-3
_MAX_IDLE_QUEUES = 64  # prune empty stream queues beyond this many, even while busy
_POLLS = 16            # polls of a lone waited-for state between looks at the clock

_CONTINUE, _ADVANCE, _COMPLETE = Action.CONTINUE, Action.ADVANCE, Action.COMPLETE
_UNBOUNDED = RunType.UNBOUNDED
_clock = time.perf_counter
_yield = os.sched_yield


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings; ``from_env`` reads them from the environment (see docs/engine.md)."""

    max_concurrent: int = DEFAULT_CONCURRENT_OPS   # AL_PE_NUM_CONCURRENT_OPS
    spin_s: float = DEFAULT_SPIN_US * 1e-6         # AL_PE_SPIN_US
    pin: bool = True                               # AL_PE_CORE=none turns pinning off
    core: int | None = None                        # AL_PE_CORE=<n>; None: from local rank
    timeout_s: float | None = None                 # AL_TIMEOUT

    @classmethod
    def from_env(cls, environ=None) -> EngineConfig:
        """Read ``AL_PE_*`` and ``AL_TIMEOUT``; a malformed value warns and keeps the default."""
        env = os.environ if environ is None else environ
        core_text = env.get("AL_PE_CORE", "").strip().lower()
        pin = core_text not in ("none", "off", "-1")
        core = None
        if pin and core_text:
            core = _parse(env, "AL_PE_CORE", int, 0, None)
        return cls(
            max_concurrent=_parse(env, "AL_PE_NUM_CONCURRENT_OPS", int, 1,
                                  DEFAULT_CONCURRENT_OPS),
            spin_s=_parse(env, "AL_PE_SPIN_US", float, 0.0, DEFAULT_SPIN_US) * 1e-6,
            pin=pin, core=core,
            timeout_s=_parse(env, "AL_TIMEOUT", float, 1e-9, None))


def _parse(env, name: str, kind: type, minimum, default):
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        warnings.warn(f"aluminum: {name}: expected {kind.__name__} >= {minimum}, got {text!r}; "
                      f"using {default}", RuntimeWarning, stacklevel=3)
        return default
    return value


class _StreamQueue:
    """One compute stream's admission queue and pipeline stages."""

    __slots__ = ("waiting", "stages", "running")

    def __init__(self) -> None:
        self.waiting: collections.deque[Request] = collections.deque()
        self.stages: list[list[Request]] = [[]]
        self.running = 0


class ProgressEngine:
    """Drives submitted states on a background thread (see the module docstring)."""

    def __init__(self, config: EngineConfig | None = None, name: str = "AlProgress") -> None:
        self.config = config if config is not None else EngineConfig.from_env()
        self.name = name
        self.core: int | None = None       # the core the thread is pinned to, if any
        self._inbox: collections.deque[Request] = collections.deque()
        # Touched only by the token holder: per-stream queues (empty ones are pruned when the
        # engine goes idle or they pile up), requests in them, bounded states running.
        self._streams: dict[object, _StreamQueue] = {}
        self._queued = 0
        self._bounded = 0
        # The one operation ``submit`` started itself while nothing else was in flight: not
        # yet in a stream queue; the next pass puts it there (``_attach``).  Token holder only.
        self._solo: Request | None = None
        self._completions = 0      # requests retired so far (the idle engine watches it)
        self._driver = threading.Lock()
        # The engine sleeps by acquiring this lock while it holds it; waking it is one
        # release (cheaper than Event.set).  A stale release only causes a spurious wake-up.
        self._wake_lock = threading.Lock()
        self._wake_lock.acquire()
        self._sleeping = False     # asleep until woken: submissions must wake it
        self._napping = False      # asleep for NAP_S: only waiters leaving work wake it
        self._callers_drive = False  # callers drive their own ops: nap, don't need waking
        self._last_seq = 0         # seq of the latest submission
        self._stopping = False     # drain, then exit
        self._abandon = False      # exit at the next pass boundary
        self._closed = False       # refuse submissions
        self._finished = False     # leftovers failed; nothing will run any more
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._seq = itertools.count(1)

    @property
    def thread(self) -> threading.Thread | None:
        """The engine thread (None until the first submission)."""
        return self._thread

    def submit(self, state: State) -> Request:
        """Queue ``state`` for the engine and return its ``Request``; thread-safe, lock-free.

        When nothing else is in flight and no thread drives, the state is admitted and
        started right here (see ``_start_now``); otherwise it goes to the inbox.
        """
        if self._closed:
            raise CommunicatorError(f"{state.name}: the progress engine was shut down "
                                    "(al.finalize()); no new operations can start")
        key = state.compute_stream
        if key is None:
            key = getattr(state, "comm", None)
        if not self._queued and self._thread is not None and not self._inbox \
                and self._driver.acquire(False):
            try:
                if not (self._queued or self._inbox or self._finished):
                    return self._start_now(state, key)
            finally:
                self._driver.release()
        request = Request(state, self, next(self._seq), key)
        self._last_seq = request.seq
        if trace.ENABLED:
            trace.engine_event("submit", state.name, request.seq, state.compute_stream)
        _check_hashable(key, state)
        self._inbox.append(request)
        if self._thread is None:
            self._start(state)
        elif self._sleeping:
            self._wake()
        if self._finished:   # lost a race with shutdown: nobody will ever run it
            request._finish(CommunicatorError(f"{state.name}: submitted while the progress "
                                              "engine shut down"))
        return request

    # -- waiting (called by Request) ---------------------------------------------------------

    def wait(self, request: Request, timeout: float | None) -> None:
        """Return once ``request`` is done, driving the engine meanwhile when the token is free.

        ``timeout=None`` means ``AL_TIMEOUT`` (forever if unset); raises ``al.TimeoutError``.
        A thread that gets the token drives until its request is done (see ``_drive``); one
        that does not spins ``AL_PE_SPIN_US`` for it, then sleeps until completion.
        """
        driver = self._driver
        if request is self._solo and driver.acquire(False):
            # The common case, the operation submit started alone: poll it here before
            # anything else (no clock, no pass).
            try:
                if request is self._solo:
                    self._step_alone(request)
            finally:
                driver.release()
            if request._done:
                return
        limit = self.config.timeout_s if timeout is None else timeout
        deadline = None if limit is None else _clock() + limit
        driver = self._driver
        spin_end = None
        while not request._done:
            if driver.acquire(False):
                try:
                    self._drive(lambda: request._done, deadline, request)
                finally:
                    self._hand_back()   # what is left goes back to the engine at once
                if not request._done:
                    break              # the deadline passed
                return
            now = _clock()
            if spin_end is None:
                spin_end = now + self.config.spin_s
            if now < spin_end:
                _yield()
                continue
            if threading.current_thread() is self._thread:
                raise OperationError(f"{_describe(request)}: a state cannot wait for a "
                                     "request inside start()/step(): the engine thread "
                                     "would wait for itself")
            remaining = None if deadline is None else max(0.0, deadline - now)
            if not request._block(remaining):
                break
        if request._done:
            return
        source = "AL_TIMEOUT" if timeout is None else "timeout"
        raise TimeoutError(f"{_describe(request)} did not complete within {source}="
                           f"{limit:g} s; it is still pending")

    def poll(self) -> None:
        """Run one engine pass on this thread if no one else is driving (for ``test``)."""
        if self._driver.acquire(False):
            try:
                self._pass()
            finally:
                self._driver.release()
                # Only a deep sleeper is woken: a napping engine will look soon enough, and
                # waking it on every test() of a busy test() loop would make it fight the
                # caller for the GIL.
                if self._sleeping and self._has_work():
                    self._wake()

    def drive_until(self, predicate: Callable[[], bool], timeout: float | None) -> None:
        """Drive the engine on this thread until ``predicate()`` holds, for a thread that
        waits on something engine work leads to (a host stream parked on an HT flag).

        Returns at once when another thread drives or nothing is queued, and also once
        nothing is left to drive or ``timeout`` seconds passed: the caller then blocks on
        its own terms.
        """
        if not self._has_work() or not self._driver.acquire(False):
            return
        try:
            self._drive(predicate, None if timeout is None else _clock() + timeout)
        finally:
            self._hand_back()

    def _hand_back(self) -> None:
        """Release the token; wake a sleeping or napping engine for what is left."""
        self._driver.release()
        if self._has_work() and (self._sleeping or self._napping):
            self._wake()

    def _drive(self, done: Callable[[], bool], deadline: float | None,
               request: Request | None = None) -> None:
        """Run passes until ``done()``, nothing is left to drive, or ``deadline`` passes;
        ``request``: the request ``done`` waits for, polled alone when it is the only one.

        While passes change nothing: spin for ``AL_PE_SPIN_US``, then yield the GIL once
        every ``YIELD_EVERY_S`` until stalled ``WAIT_YIELD_S``, then sleep ``BACKOFF_S``
        between passes.  Yields are rationed because each one lets the napping engine thread
        take the GIL, and getting it back costs this thread a 20-50 µs wake-up.  The clock
        is read only once a pass changed nothing, so a quick operation never reads it.
        """
        run_pass = self._pass
        spin_s = self.config.spin_s
        stalled_since = next_yield = None
        while not done():
            if request is not None and self._queued == 1 and not self._inbox and (
                    request is self._solo or request.queue is not None and not request.parked):
                changed = self._step_alone(request)
            elif not self._has_work():
                return
            else:
                changed = run_pass()
            if changed:
                stalled_since = None
                continue
            now = _clock()
            if stalled_since is None:
                stalled_since, next_yield = now, now + spin_s
            elif deadline is not None and now >= deadline:
                return
            elif now - stalled_since > WAIT_YIELD_S:
                time.sleep(BACKOFF_S)
            elif now >= next_yield:
                _yield()
                next_yield = now + YIELD_EVERY_S

    def _step_alone(self, request: Request) -> bool:
        """Step the only request in flight, as a pass would, up to ``_POLLS`` times while it
        returns CONTINUE and nothing new is submitted; True once it did anything else.

        A state that polls (waiting on a peer) steps tens of times per operation, so the walk
        over queues and the clock reads a pass loop makes would add up.
        """
        step, inbox = request.state.step, self._inbox
        for _ in range(_POLLS):
            try:
                action = step()
            except BaseException as exc:  # noqa: BLE001 - fails only this request
                self._settle_alone(request, None, exc)
                return True
            if action is not _CONTINUE:
                self._settle_alone(request, action)
                return True
            if inbox:
                break
        return False

    def _settle_alone(self, request: Request, action, error: BaseException | None = None):
        """``_settle`` for the only request in flight, which may still be the solo one."""
        if request is self._solo:
            if action is _COMPLETE:   # _retire, inlined: the hot path of short operations
                self._solo = None
                self._queued = 0
                self._completions += 1
                if trace.ENABLED:
                    trace.engine_event("complete", request.state.name, request.seq,
                                       request.state.compute_stream)
                request._finish()
                return
            self._attach(request)
        self._settle(request.queue, request, 0, action, error)

    def _has_work(self) -> bool:
        return bool(self._inbox) or self._queued > 0

    def _wake(self) -> None:
        try:
            self._wake_lock.release()
        except RuntimeError:   # already released by another waker
            pass

    # -- the engine thread -------------------------------------------------------------------

    def _start(self, first_state: State) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            thread.start()
            self._thread = thread
        if self.config.pin:
            self._pin(thread, first_state)

    def _pin(self, thread: threading.Thread, state: State) -> None:
        core = self.config.core
        if core is None:
            core = default_core(*node_local_rank(state), sorted(os.sched_getaffinity(0)))
            if core is None:
                return
        try:
            os.sched_setaffinity(thread.native_id, {core})
        except (OSError, ValueError) as exc:
            warnings.warn(f"aluminum: could not pin the progress engine to core {core} "
                          f"(AL_PE_CORE): {exc}", RuntimeWarning, stacklevel=4)
        else:
            self.core = core

    def _run(self) -> None:
        driver = self._driver
        stalled_since = None   # start of the current run of passes that changed nothing
        try:
            while not self._abandon:
                if not driver.acquire(False):
                    # A caller drives.  Nap rather than queue for the token: each time this
                    # thread takes the GIL from a driving caller, it costs that caller a
                    # 20-50 µs wake-up to get it back.
                    self._callers_drive = True
                    self._nap(NAP_S)
                    stalled_since = None
                    continue
                try:
                    progressed = self._pass()
                finally:
                    driver.release()
                if progressed:
                    stalled_since = None
                if not self._has_work():
                    if self._stopping:
                        return
                    self._idle()
                    stalled_since = None
                elif not progressed:
                    now = _clock()
                    if stalled_since is None:
                        stalled_since = now
                    if now - stalled_since > self.config.spin_s:
                        self._sleep(BACKOFF_S)
                    else:
                        _yield()
        except BaseException as exc:   # an engine bug: fail everything rather than hang
            self._finished = True
            self._fail_leftovers(lambda request: OperationError(
                f"{_describe(request)}: the progress engine crashed: {exc!r}"))
            raise

    def _idle(self) -> None:
        """Wait for work: spin ``AL_PE_SPIN_US``, nap while callers drive, then sleep."""
        end = _clock() + self.config.spin_s
        while _clock() < end:
            if self._has_work() or self._stopping:
                return
            _yield()
        if self._callers_drive and self._nap_while_callers_drive():
            return
        if self._streams and self._driver.acquire(False):
            try:
                self._prune()
            finally:
                self._driver.release()
        self._sleep()

    def _nap_while_callers_drive(self) -> bool:
        """Poll every ``NAP_S`` while submissions keep coming; True once work needs us.

        Callers that wait for their own operations drive them; waking the engine for each
        submission would only make it take the GIL from them.  Pending work is not a reason
        to step in (a caller between ``submit`` and ``wait`` has work in flight most of the
        time); work that saw no completion in a whole nap while nobody held the token is (a
        caller that did not wait), and turns napping off until the token is found held again.
        """
        seen, quiet_since = self._last_seq, _clock()
        while not self._stopping:
            completions = self._completions
            self._nap(NAP_S)
            if self._has_work() and self._completions == completions \
                    and not self._driver.locked():
                self._callers_drive = False
                return True
            if self._last_seq != seen:
                seen, quiet_since = self._last_seq, _clock()
            elif _clock() - quiet_since > LAZY_S:
                return False
        return True

    def _nap(self, seconds: float) -> None:
        """Sleep ``seconds``; submissions do not wake a nap, a waiter handing work back does."""
        wake = self._wake_lock
        wake.acquire(False)
        self._napping = True
        wake.acquire(timeout=seconds)
        self._napping = False

    def _sleep(self, timeout: float = -1) -> None:
        """Sleep until a submission wakes us (or ``timeout`` s pass, when given)."""
        wake = self._wake_lock
        wake.acquire(False)   # re-arm: a stale wake-up may have released it
        # Announce, then re-check: a submitter (or leaving driver) that acted before seeing
        # ``_sleeping`` is caught by the re-check; one that saw it releases the lock.
        self._sleeping = True
        if timeout >= 0:      # backing off while busy: only new submissions matter
            if not (self._inbox or self._stopping):
                wake.acquire(timeout=timeout)
        elif not (self._has_work() or self._stopping):
            wake.acquire()
        self._sleeping = False

    # -- one pass: admission, then one step of every running state ---------------------------

    def _pass(self) -> bool:
        """Admit, then step each running state once; True if anything changed.

        Only the holder of the driver token may call this.
        """
        inbox, streams = self._inbox, self._streams
        if self._solo is not None:
            self._attach(self._solo)
        while inbox:
            request = inbox.popleft()
            queue = streams.get(request.key)
            if queue is None:
                queue = streams[request.key] = _StreamQueue()
            queue.waiting.append(request)
            self._queued += 1
        changed = False
        for queue in streams.values():
            if queue.waiting and self._admit(queue):
                changed = True
            if queue.running and self._step(queue):
                changed = True
        if len(streams) > _MAX_IDLE_QUEUES:
            self._prune()
        return changed

    def _prune(self) -> None:
        """Drop empty stream queues, and with them the references to their streams."""
        streams = self._streams
        for key in [key for key, queue in streams.items()
                    if not queue.running and not queue.waiting]:
            del streams[key]

    def _start_now(self, state: State, key) -> Request:
        """Start ``state`` on the submitting thread, which holds the token, while nothing
        else is queued or running (so admission rules hold trivially); it becomes ``_solo``.

        Like ``MPI_Iallreduce``, the operation is posted before the call returns, and a later
        ``wait`` only polls it.  ``start()`` comes first and the bookkeeping after it, kept to
        a minimum: in a loop of short operations the peer is waiting for this post.
        """
        try:
            hash(key)
        except TypeError:
            _check_hashable(key, state)
        seq = next(self._seq)
        if trace.ENABLED:
            trace.engine_event("submit", state.name, seq, state.compute_stream)
            trace.engine_event("admit", state.name, seq, state.compute_stream)
        request = Request(state, self, seq, key)
        self._last_seq = seq
        self._queued = 1
        try:
            state.start()
        except BaseException as exc:  # noqa: BLE001 - fails only this request
            self._retire(request, exc)
            return request
        if trace.ENABLED:
            trace.engine_event("start", state.name, seq, state.compute_stream)
        self._solo = request
        if self._sleeping:
            self._wake()
        return request

    def _attach(self, request: Request) -> None:
        """Put the solo request, started by ``submit``, in its stream queue."""
        self._solo = None
        queue = self._streams.get(request.key)
        if queue is None:
            queue = self._streams[request.key] = _StreamQueue()
        self._enter(queue, request)

    def _admit(self, queue: _StreamQueue) -> bool:
        waiting, limit = queue.waiting, self.config.max_concurrent
        admitted = False
        while waiting:
            request = waiting[0]
            state = request.state
            if state.run_type is not _UNBOUNDED and self._bounded >= limit and queue.running:
                break
            waiting.popleft()
            admitted = True
            if trace.ENABLED:
                trace.engine_event("admit", state.name, request.seq, state.compute_stream)
            try:
                state.start()
            except BaseException as exc:  # noqa: BLE001 - fails only this request
                self._retire(request, exc)
                continue
            if trace.ENABLED:
                trace.engine_event("start", state.name, request.seq, state.compute_stream)
            self._enter(queue, request)
        return admitted

    def _enter(self, queue: _StreamQueue, request: Request) -> None:
        """A started request (counted in ``_queued``) runs in stage 0 of ``queue``."""
        if request.state.run_type is not _UNBOUNDED:
            self._bounded += 1
            request.bounded = True
        request.queue = queue
        queue.stages[0].append(request)
        queue.running += 1

    def _step(self, queue: _StreamQueue) -> bool:
        """Step each running state of ``queue`` once, stage by stage; True if any changed."""
        changed = False
        for stage in queue.stages:          # a list: stages appended meanwhile are visited
            i = 0
            while i < len(stage):
                request = stage[i]
                if request.parked:
                    if i == 0:              # the head left: move on to the next stage
                        request.parked = False
                        self._advance(queue, request)
                        changed = True
                    else:
                        i += 1
                    continue
                try:
                    action = request.state.step()
                except BaseException as exc:  # noqa: BLE001 - fails only this request
                    self._settle(queue, request, i, None, exc)
                    changed = True
                    continue
                if action is _CONTINUE:
                    i += 1
                    continue
                changed = True
                if self._settle(queue, request, i, action):
                    i += 1
        return changed

    def _settle(self, queue: _StreamQueue, request: Request, position: int, action,
                error: BaseException | None = None) -> bool:
        """Apply a step's outcome other than CONTINUE to the request at ``position`` of its
        stage; True if it stays there (ADVANCE behind the head parks it)."""
        if error is None and action is _ADVANCE:
            if position:
                request.parked = True
                return True
            self._advance(queue, request)
            return False
        if error is None and action is not _COMPLETE:
            error = TypeError(f"step() returned {action!r}, expected an Action")
        del queue.stages[request.stage][position]
        queue.running -= 1
        self._retire(request, error)
        return False

    @staticmethod
    def _advance(queue: _StreamQueue, request: Request) -> None:
        """Move the head of a stage to the end of the next stage."""
        stages = queue.stages
        stages[request.stage].pop(0)
        request.stage += 1
        if request.stage == len(stages):
            stages.append([])
        stages[request.stage].append(request)

    def _retire(self, request: Request, error: BaseException | None) -> None:
        self._queued -= 1
        self._completions += 1
        if request.bounded:
            self._bounded -= 1
        if trace.ENABLED:
            state = request.state
            trace.engine_event("complete" if error is None else "fail", state.name,
                               request.seq, state.compute_stream)
        if error is None:
            request._finish()
        else:
            request._fail(error)

    # -- shutdown ----------------------------------------------------------------------------

    def shutdown(self, timeout: float | None = None) -> bool:
        """Refuse new work, let in-flight operations finish, then stop the thread.

        Waits up to ``timeout`` seconds (forever if None); operations still pending then fail
        with ``al.TimeoutError``.  Returns True if everything completed.  Idempotent.
        """
        self._closed = True
        self._stopping = True
        self._wake()
        thread = self._thread
        clean = True
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)
            clean = not thread.is_alive()
        if not clean:
            self._abandon = True
        # Wait for a pass in progress to end; a state stuck inside step() cannot be waited for.
        have_token = self._driver.acquire(timeout=0.1)
        try:
            self._finished = True
            after = "" if timeout is None else f" after {timeout:g} s"
            failed = self._fail_leftovers(lambda request: TimeoutError(
                f"{_describe(request)} was still pending when the progress engine shut down "
                f"(al.finalize()){after}; it was abandoned"))
        finally:
            if have_token:
                self._driver.release()
        if not clean:   # nothing left to drive: let the thread see that and exit
            self._wake()
            thread.join(0.1)
        return clean and not failed

    def _fail_leftovers(self, make_error: Callable[[Request], BaseException]) -> int:
        """Fail every request not yet complete; return how many there were."""
        requests = list(self._inbox)
        self._inbox.clear()
        if self._solo is not None:
            requests.append(self._solo)
            self._solo = None
        for queue in list(self._streams.values()):
            requests += queue.waiting
            requests += [request for stage in queue.stages for request in stage]
        self._streams = {}
        self._queued = 0
        return sum(request._finish(make_error(request)) for request in requests)


def _check_hashable(key, state: State):
    """``key`` if it can key the stream queues; else a TypeError naming the state."""
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"{state.name}: compute_stream (or comm) must be hashable to "
                        f"order operations on it, got {type(key).__name__}") from None
    return key


def _describe(request: Request) -> str:
    """``"allreduce/ring (request #12, rank 1 of 4)"``: the op, its sequence number, where."""
    comm = getattr(request.state, "comm", None)
    where = ""
    if comm is not None and hasattr(comm, "rank") and hasattr(comm, "size"):
        where = f", rank {comm.rank} of {comm.size}"
    return f"{request.state.name} (request #{request.seq}{where})"


# -- core pinning --------------------------------------------------------------------------

_LOCAL_RANK_ENV = (("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                   ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"))


def node_local_rank(state: State | None = None) -> tuple[int, int]:
    """``(local_rank, local_size)`` of this process on its node.

    From the launcher's environment (Open MPI, MPICH), else from the first state's
    communicator (``state.comm.local_rank``/``local_size``), else ``(0, 1)``.
    """
    for rank_var, size_var in _LOCAL_RANK_ENV:
        rank, size = os.environ.get(rank_var, ""), os.environ.get(size_var, "")
        if rank.isdigit() and size.isdigit():
            return int(rank), int(size)
    comm = getattr(state, "comm", None)
    rank, size = getattr(comm, "local_rank", None), getattr(comm, "local_size", None)
    if isinstance(rank, int) and isinstance(size, int):
        return rank, size
    return 0, 1


def default_core(local_rank: int, local_size: int, cores: list[int]) -> int | None:
    """The core the engine of ``local_rank`` pins to, or None (more local ranks than cores).

    Counted from the last allowed core down, so node-local ranks never share one and the
    engines keep away from core 0, where main threads and interrupts tend to sit.
    """
    if not cores or local_size > len(cores) or not 0 <= local_rank < len(cores):
        return None
    return cores[len(cores) - 1 - local_rank]


# -- the process's engine ------------------------------------------------------------------

_engine: ProgressEngine | None = None
_engine_lock = threading.Lock()


def get_engine() -> ProgressEngine:
    """The process's engine, created on first use (its thread starts on first submission).

    Creating it registers ``finalize_engine`` with ``al.finalize`` and with ``atexit``.
    """
    global _engine
    engine = _engine
    if engine is None:
        with _engine_lock:
            if _engine is None:
                _engine = ProgressEngine()
                runtime.at_finalize(finalize_engine)
                atexit.register(finalize_engine)
            engine = _engine
    return engine


def submit(state: State) -> Request:
    """Queue ``state`` on the process's engine; return its ``Request`` (see ``Request``)."""
    return (_engine or get_engine()).submit(state)


def drive_until(predicate: Callable[[], bool], timeout: float | None) -> None:
    """``ProgressEngine.drive_until`` on the process's engine (nothing if it has none)."""
    engine = _engine
    if engine is not None:
        engine.drive_until(predicate, timeout)


def shutdown(timeout: float | None = None) -> bool:
    """Shut the process's engine down (``ProgressEngine.shutdown``); True if nothing failed."""
    engine = _engine
    return True if engine is None else engine.shutdown(timeout)


def finalize_engine() -> None:
    """``al.finalize``/exit hook: shut down, bounded by ``AL_TIMEOUT`` (default 30 s)."""
    engine = _engine
    if engine is not None and not engine._finished:
        timeout = engine.config.timeout_s
        engine.shutdown(DEFAULT_FINALIZE_TIMEOUT_S if timeout is None else timeout)


def _forget_engine_in_child() -> None:
    global _engine, _engine_lock
    _engine, _engine_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_engine_in_child)
