"""The progress engine: one daemon thread per process that drives ``State`` objects.

Semantics (../shared/DESIGN.md §2, after Aluminum's ``progress.cpp``): ``submit(state)``
appends a ``Request`` to one input deque (``deque.append`` is atomic, so any number of threads
submit with no Python lock) and starts the engine thread on first use; what is admitted and
stepped when is the ``Scheduler``'s business (``scheduler.py``), who runs it is this module's.

The driver token and the GIL.  Two busy Python threads in one process starve each other: a
thread that lost the GIL gets it back at the other's next blocking call, or after the 5 ms
switch interval, and being woken costs it 20-50 µs here.  So exactly one thread runs engine
passes at a time, whoever holds ``_driver`` (a ``DriverToken``, token.py):

- A thread in ``Request.wait`` takes the token when it is free and drives until its request
  is done (like ``MPI_Wait`` progressing MPI): a short operation completes with no thread
  handoff at all.  ``Request.test`` runs one pass.  Such callers drive every queued
  operation, not only their own.
- The engine thread drives when no caller does: operations nobody waits on progress in the
  background.  Finding the token held, it concludes that callers drive and, once idle,
  naps (``NAP_S`` at a time, not woken by submissions) instead of sleeping until the next
  submission wakes it, until ``LAZY_S`` passes without submissions or it finds work that
  saw no completion in a whole nap while nobody held the token (a caller that did not
  wait): such work progresses at most ``2 * NAP_S`` late, and then the engine is woken by
  submissions again.  Threads that wait on something else engine work leads to (a host
  stream parked on a host-transfer flag) drive through ``drive_until``.
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
import os
import threading
import time
import warnings
from typing import Callable

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from ..core import pure_cython as cython

from ..core import trace
from ..core.errors import CommunicatorError, OperationError, TimeoutError
from .config import EngineConfig, default_core, node_local_rank, pin_thread
from .request import Request, in_done_callback
from .scheduler import TRACING, Scheduler, check_hashable, describe
from .state import State
from .token import DriverToken

__all__ = ["EngineConfig", "ProgressEngine", "abandoned_any", "abandoned_owner",
           "default_core", "drain", "drive_until", "finalize_timeout", "get_engine",
           "node_local_rank", "shutdown", "submit", "submit_made",
           "wait_started_on"]

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
_clock = time.perf_counter
_yield = os.sched_yield


@cython.cclass
class ProgressEngine(Scheduler):
    """Drives submitted states on a background thread (see the module docstring)."""

    __slots__ = ("name", "core", "_driver", "_wake_lock", "_sleeping", "_napping",
                 "_callers_drive", "_stopping", "_abandon", "_closed", "_finished",
                 "_thread", "_start_lock")

    def __init__(self, config: EngineConfig | None = None, name: str = "AlProgress") -> None:
        super().__init__(config if config is not None else EngineConfig.from_env())
        self.name = name
        self.core: int | None = None       # the core the thread is pinned to, if any
        self._driver = DriverToken()
        # The engine sleeps by acquiring this lock while it holds it; waking it is one
        # release (cheaper than Event.set).  A stale release only causes a spurious wake-up.
        self._wake_lock = threading.Lock()
        self._wake_lock.acquire()
        self._sleeping = False     # asleep until woken: submissions must wake it
        self._napping = False      # asleep for NAP_S: only waiters leaving work wake it
        self._callers_drive = False  # callers drive their own ops: nap, don't need waking
        self._stopping = False     # drain, then exit
        self._abandon = False      # exit at the next pass boundary
        self._closed = False       # refuse submissions
        self._finished = False     # leftovers failed; nothing will run any more
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    @property
    def thread(self) -> threading.Thread | None:
        """The engine thread (None until the first submission)."""
        return self._thread

    def submit(self, state: State, background: bool = False) -> Request:
        """Queue ``state`` for the engine and return its ``Request``; thread-safe, lock-free.

        When nothing else is in flight and no thread drives, the state is admitted and
        started right here, on this thread; otherwise it goes to the inbox.
        ``background``: no thread will wait for the request (a stream-ordered blocking call
        on a device stream), so the engine thread is woken for it even while callers drive.
        """
        if self._closed:
            raise CommunicatorError(f"{state.name}: the progress engine was shut down "
                                    "(al.finalize()); no new operations can start")
        key = state.compute_stream
        if key is None:
            key = getattr(state, "comm", None)
        if not self._queued and self._thread is not None and not self._inbox \
                and self._driver.take():
            # Nothing else in flight and no thread drives: start it here (like
            # ``MPI_Iallreduce``, posted before the call returns; ``wait`` only polls it) as
            # the one request in flight, ``_solo``, which the queues never see unless a
            # pass runs meanwhile (``Scheduler._attach``).  Kept to the minimum, and the
            # ``Request`` made after the post: in a loop of short operations every
            # microsecond before the post is one the peer waits too.
            try:
                if not (self._queued or self._inbox or self._finished):
                    try:
                        hash(key)
                    except TypeError:
                        check_hashable(key, state)   # (raises, naming the state)
                    seq = self._last_seq = next(self._seq)
                    tracing = TRACING
                    if tracing:
                        trace.engine_event("submit", state.name, seq, state.compute_stream)
                        trace.engine_event("admit", state.name, seq, state.compute_stream)
                    self._queued = 1
                    try:
                        state.start()
                    except BaseException as exc:  # noqa: BLE001 - fails only this request
                        request = Request.made(state, self, seq, key)
                        self._retire(request, exc)
                        return request
                    request = self._solo = Request.made(state, self, seq, key)
                    if tracing:
                        trace.engine_event("start", state.name, seq, state.compute_stream)
                    if background:
                        self._wake_for_background()
                    elif self._sleeping and not state.progresses_alone:
                        self._wake()       # it must progress even if nobody waits
                    return request
            finally:
                self._driver.give()
        request = Request.made(state, self, next(self._seq), key)
        self._last_seq = request.seq
        if TRACING:
            trace.engine_event("submit", state.name, request.seq, state.compute_stream)
        check_hashable(key, state)
        self._inbox.append(request)
        if self._thread is None:
            self._start(state)
        elif self._sleeping:
            self._wake()
        if self._finished:   # lost a race with shutdown: nobody will ever run it
            request._finish(CommunicatorError(f"{state.name}: submitted while the progress "
                                              "engine shut down"))
        if background:
            self._wake_for_background()
        return request

    def _wake_for_background(self) -> None:
        self._callers_drive = False
        if self._sleeping or self._napping:
            self._wake()

    # -- waiting (called by Request) ---------------------------------------------------------

    @cython.locals(driver="DriverToken")
    def wait(self, request: Request, timeout: float | None) -> None:
        """Return once ``request`` is done, driving the engine meanwhile when the token is free.

        ``timeout=None`` means ``AL_TIMEOUT`` (forever if unset); raises ``al.TimeoutError``.
        A thread that gets the token drives until its request is done (see ``_drive``); one
        that does not spins ``AL_PE_SPIN_US`` for it, then sleeps until completion.
        """
        driver = self._driver
        if request is self._solo and driver.take():
            # The common case, the operation submit started alone: poll it here before
            # anything else (no clock, no pass).
            try:
                if request is self._solo:
                    self._step_alone(request)
            finally:
                driver.give()
            if request._done:
                return
        self._wait_longer(request, timeout)

    @cython.locals(driver="DriverToken")
    def _wait_longer(self, request: Request, timeout: float | None) -> None:
        """``wait`` past its first polls (a method of its own: its closure would cost
        every quick wait an allocation)."""
        limit = self.config.timeout_s if timeout is None else timeout
        # Without a limit, the deadline is when to warn of a stall (once), then none.
        stall_at = _clock() + self.config.stall_warn_s if limit is None else None
        deadline = stall_at if limit is None else _clock() + limit
        driver = self._driver
        spin_end = None
        while not request._done:
            if deadline is not None and deadline is stall_at and _clock() >= stall_at:
                self._warn_stall(request)
                deadline = None
            if driver.take():
                try:
                    self._drive(lambda: request._done, deadline, request)
                finally:
                    self._hand_back()   # what is left goes back to the engine at once
                if not request._done:
                    if deadline is stall_at:
                        continue       # warn, then drive on
                    break              # the deadline passed
                return
            now = _clock()
            if spin_end is None:
                spin_end = now + self.config.spin_s
            if now < spin_end:
                _yield()
                continue
            if threading.current_thread() is self._thread:
                raise OperationError(f"{describe(request)}: a state cannot wait for a "
                                     "request inside start()/step(): the engine thread "
                                     "would wait for itself")
            remaining = None if deadline is None else max(0.0, deadline - now)
            if not request._block(remaining) and deadline is not stall_at:
                break
        if request._done:
            return
        source = "AL_TIMEOUT" if timeout is None else "timeout"
        detail = _detail(request)
        message = (f"{describe(request)} did not complete within {source}={limit:g} s; it is "
                   f"still pending{detail}")
        dumped = trace.dump_flight_record(message)
        raise TimeoutError(message if dumped is None else f"{message}; flight record: {dumped}")

    def _warn_stall(self, request: Request) -> None:
        """Horovod's stall inspector: say once that ``request`` has been waited for
        ``AL_STALL_WARN_S`` (no ``AL_TIMEOUT`` to end the wait), and who is missing."""
        if request.stall_warned:
            return
        request.stall_warned = True
        detail = _detail(request)
        warnings.warn(f"aluminum: {describe(request)} has been waited for "
                      f"{self.config.stall_warn_s:g} s (AL_STALL_WARN_S) without completing"
                      f"{detail}; set AL_TIMEOUT to make this an error", RuntimeWarning,
                      stacklevel=5)

    def drain(self, match: Callable[[State], bool], timeout: float,
              make_error: Callable[[Request], BaseException]) -> int:
        """Wait up to ``timeout`` seconds for the pending requests whose state satisfies
        ``match``, then fail the ones still pending with ``make_error(request)`` (taken out of
        the queues, so nothing steps them again); return how many failed.  Requests that
        complete or fail on their own meanwhile are not this call's business."""
        deadline = _clock() + timeout
        if not self._driver.take_within(timeout):
            raise CommunicatorError(f"another thread kept driving the progress engine for "
                                    f"{timeout:g} s; its operations could not be inspected")
        try:
            pending = self._pending_where(match)
        finally:
            self._hand_back()
        for request in pending:
            remaining = deadline - _clock()
            if remaining <= 0:
                break
            try:
                self.wait(request, remaining)
            except TimeoutError:
                break
        if not self._driver.take_within(max(0.0, deadline - _clock()) + 1.0):
            raise CommunicatorError(f"another thread kept driving the progress engine for "
                                    f"{timeout:g} s; its operations could not be failed")
        try:
            return self._fail_where(match, make_error)
        finally:
            self._hand_back()

    def wait_started(self, key) -> None:
        """Return once every request submitted so far on ``key`` has been started (left the
        inbox and its stream queue's waiting line), driving the engine meanwhile.

        What a collective started on the caller's thread (a blocking call, a plan's MPI
        persistent request being made or run) waits for first: MPI needs every rank to start
        the collectives of a communicator in one order, and nonblocking ones submitted
        before it may still be queued here while another rank has started them (Open MPI's
        persistent and nonblocking collectives share a tag counter: overtaking a queued
        ``MPI_Iallreduce`` mismatched their messages, ``MPI_ERR_TRUNCATE``).  Going through
        the engine instead would not do: a blocking collective never matches the
        nonblocking form another rank would run.  Only ``key``'s queue is waited for, so
        collectives on other communicators, legally ordered otherwise by other ranks,
        cannot deadlock it.  On the engine thread and in done callbacks (which may hold the
        token) it returns at once: nothing could start the queued requests meanwhile.
        """
        if threading.current_thread() is self._thread or in_done_callback():
            return
        looked_since = None
        while self._queued or self._inbox:
            if not self._driver.take():   # another thread drives; look again soon
                now = _clock()
                looked_since = looked_since or now
                if now - looked_since > WAIT_YIELD_S:
                    time.sleep(BACKOFF_S)
                else:
                    _yield()
                continue
            try:
                if not self._unstarted(key):
                    return
                self._drive(lambda: not self._unstarted(key), None)
                if not self._unstarted(key):
                    return
            finally:
                self._hand_back()

    def _unstarted(self, key) -> bool:
        """Whether a request on ``key`` waits to start (only the token holder may ask)."""
        if any(request.key is key for request in tuple(self._inbox)):   # (copied atomically)
            return True
        queue = self._streams.get(key)
        return queue is not None and bool(queue.waiting)

    def poll(self) -> None:
        """Run one engine pass on this thread if no one else is driving (for ``test``)."""
        if self._driver.take():
            try:
                self._pass()
            finally:
                self._driver.give()
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
        if not self._has_work() or not self._driver.take():
            return
        try:
            self._drive(predicate, None if timeout is None else _clock() + timeout)
        finally:
            self._hand_back()

    def _hand_back(self) -> None:
        """Release the token; wake a sleeping or napping engine for what is left."""
        self._driver.give()
        if self._has_work() and (self._sleeping or self._napping):
            self._wake()

    def _drive(self, done: Callable[[], bool], deadline: float | None,
               request: Request | None = None) -> None:
        """Run passes until ``done()``, nothing is left to drive, or ``deadline`` passes;
        ``request``: the request ``done`` waits for.  The only request in flight (that one,
        or the one ``submit`` started) is polled alone, without walking the queues.

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
            alone = request if request is not None else self._solo
            if alone is not None and self._queued == 1 and not self._inbox and (
                    alone is self._solo or alone.queue is not None and not alone.parked):
                changed = self._step_alone(alone)
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
            self.core = pin_thread(thread, self.config, first_state)

    @cython.locals(driver="DriverToken")
    def _run(self) -> None:
        driver = self._driver
        stalled_since = None   # start of the current run of passes that changed nothing
        try:
            while not self._abandon:
                if not driver.take():
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
                    driver.give()
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
            crash = repr(exc)
            self._fail_leftovers(lambda request: OperationError(
                f"{describe(request)}: the progress engine crashed: {crash}"))
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
        if self._streams and self._driver.take():
            try:
                self._prune()
            finally:
                self._driver.give()
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
            if not self._callers_drive:   # a background submission woke us
                return True
            if self._has_work() and self._completions == completions \
                    and not self._driver.held():
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
        have_token = self._driver.take_within(0.1)
        try:
            self._finished = True
            after = "" if timeout is None else f" after {timeout:g} s"
            failed = self._fail_leftovers(lambda request: TimeoutError(
                f"{describe(request)} was still pending when the progress engine shut down "
                f"(al.finalize()){after}; it was abandoned"))
        finally:
            if have_token:
                self._driver.give()
        if not clean:   # nothing left to drive: let the thread see that and exit
            self._wake()
            thread.join(0.1)
        return clean and not failed


# -- the process's engine ------------------------------------------------------------------

_engine: ProgressEngine | None = None
_engine_lock = threading.Lock()


def get_engine() -> ProgressEngine:
    """The process's engine, created on first use (its thread starts on first submission).

    Creating it registers ``finalize_engine`` with ``atexit`` (``al.finalize`` calls it too).
    """
    global _engine
    engine = _engine
    if engine is None:
        with _engine_lock:
            if _engine is None:
                _engine = ProgressEngine()
                atexit.register(finalize_engine)
            engine = _engine
    return engine


@cython.locals(engine=ProgressEngine)
def wait_started_on(key) -> None:
    """Return once every operation submitted so far on ``key`` (a host communicator) has
    started (``ProgressEngine.wait_started``); at once when nothing is in flight (compiled:
    two field reads, what every blocking run pays)."""
    engine = _engine
    if engine is not None and (engine._queued or engine._inbox):
        engine.wait_started(key)


def submit(state: State, background: bool = False) -> Request:
    """Queue ``state`` on the process's engine; return its ``Request`` (see
    ``ProgressEngine.submit``)."""
    return (_engine or get_engine()).submit(state, background)


def submit_made(make: Callable[[], State]) -> Request:
    """``submit(make())``, a frame shorter: what a plan's repeated nonblocking starts call."""
    return (_engine or get_engine()).submit(make())


def drive_until(predicate: Callable[[], bool], timeout: float | None) -> None:
    """``ProgressEngine.drive_until`` on the process's engine (nothing if it has none)."""
    engine = _engine
    if engine is not None:
        engine.drive_until(predicate, timeout)


def shutdown(timeout: float | None = None) -> bool:
    """Shut the process's engine down (``ProgressEngine.shutdown``); True if nothing failed."""
    engine = _engine
    return True if engine is None else engine.shutdown(timeout)


def drain(match: Callable[[State], bool], timeout: float,
          make_error: Callable[[Request], BaseException]) -> int:
    """``ProgressEngine.drain`` on the process's engine (0 if it has none)."""
    engine = _engine
    return 0 if engine is None else engine.drain(match, timeout, make_error)


def abandoned_owner(owner) -> bool:
    """True if the process's engine ever abandoned an operation whose state's ``comm`` is
    ``owner`` (its MPI requests may still be pending)."""
    engine = _engine
    return engine is not None and engine.abandoned_owner(owner)


def abandoned_any() -> bool:
    """True if the process's engine ever abandoned an operation that had an owner."""
    engine = _engine
    return engine is not None and bool(engine._abandoned_owners)


def finalize_timeout() -> float:
    """How long finalize (and ``comm.free()``) wait for operations: ``AL_TIMEOUT``, else
    ``DEFAULT_FINALIZE_TIMEOUT_S``."""
    engine = _engine
    timeout = (engine.config if engine is not None else EngineConfig.from_env()).timeout_s
    return DEFAULT_FINALIZE_TIMEOUT_S if timeout is None else timeout


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


def _detail(request: Request) -> str:
    """``request.detail``'s words for a message, with their separator ("" when none)."""
    if request.detail is None:
        return ""
    function, argument = request.detail
    return f"; {function(argument)}"
