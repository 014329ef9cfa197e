"""The handle a nonblocking call returns: ``Request.wait``, ``Request.test``, ``wait_all``...

A request completes when the engine sees its state's ``step()`` return ``COMPLETE`` (or fails
when ``start``/``step`` raised).  ``wait`` and ``test`` do not just look at a flag: while the
engine's driver token is free they run engine passes themselves on the calling thread, like
``MPI_Wait`` progressing MPI.  Under the GIL this is what makes a short operation cheap: the
caller finishes it without handing the interpreter to the engine thread and back (each handoff
is a 20-50 µs thread wake-up here).  See ``progress.py`` for the token.

Compiled (aluminum/core/compiled.py), ``Request`` is an extension type with a fixed set of
attributes, as the engine's ``Scheduler`` and ``ProgressEngine`` are: one is made per
nonblocking call, and every field the engine reads or writes on the way is a C field.
What surprises people: a Request takes no attributes of a caller's own (``__slots__``, also
uncompiled).
"""
from __future__ import annotations

import os
import threading
import time
import warnings
from typing import TYPE_CHECKING, Callable, Iterable

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from ..core import pure_cython as cython

from ..core.errors import ArgumentError, OperationError, TimeoutError
from .completion import Completion, mark_done, wait_done

if TYPE_CHECKING:
    from .progress import ProgressEngine
    from .state import State

__all__ = ["Request", "test_all", "wait_all", "wait_any"]

_running_callbacks = threading.local()   # .active: this thread is inside a done callback
_callbacks_made = threading.Lock()        # guards only the making of a callback list


def in_done_callback() -> bool:
    """True on a thread running a request's done callback (it may hold the engine's token)."""
    return getattr(_running_callbacks, "active", False)


@cython.cclass
class Request:
    """Handle of one nonblocking operation, returned by every ``al.nonblocking_*`` call.

    ``seq`` numbers requests in submission order within the process (traces and timeout
    messages use it).  The buffers given to the call must not be touched until ``wait``
    returns or ``test`` returns True.
    """

    __slots__ = ("state", "seq", "key", "_engine", "queue", "stage", "bounded", "parked",
                 "detail", "stall_warned", "on_stream", "_done", "_error", "_event",
                 "_callbacks", "__weakref__")

    def __init__(self, state: State, engine: ProgressEngine, seq: int, key=None) -> None:
        self.state = state
        self.seq = seq
        self.key = key         # the admission queue: compute stream, else communicator
        self._engine = engine
        self.queue = None      # once admitted: its stream queue, and its pipeline stage there
        self.stage = 0
        self.bounded = False   # counted against AL_PE_NUM_CONCURRENT_OPS (set on admission)
        self.parked = False    # returned ADVANCE behind the head of its pipeline stage
        # optional (function, argument): function(argument) gives more words for a
        # timeout's or stall warning's message (who never arrived)
        self.detail = None
        self.stall_warned = False  # AL_STALL_WARN_S's warning was given (once per operation)
        self.on_stream = False  # wait_on_stream ordered a stream after it (the host did not)
        self._done = False
        self._error: BaseException | None = None
        self._event: threading.Event | None = None
        self._callbacks: list | None = None

    @staticmethod
    @cython.cfunc
    @cython.locals(request="Request")
    def made(state: State, engine: ProgressEngine, seq: int, key) -> Request:
        """``Request(state, engine, seq, key)``, compiled without parsing the arguments of a
        call (the engine makes one per nonblocking call): a new extension object's fields
        start as ``__init__`` sets the others (None, 0, False)."""
        if not cython.compiled:
            return Request(state, engine, seq, key)
        request = Request.__new__(Request)
        request.state, request._engine, request.seq, request.key = state, engine, seq, key
        return request

    @property
    def done(self) -> bool:
        """True once the operation completed or failed.  Does not drive progress, except that
        a state that progresses alone (a GPU operation; ``State.progresses_alone``), which no
        engine pass may have looked at since it was submitted, is polled once."""
        if not self._done and self.state.progresses_alone:
            self._engine.poll()
        return self._done

    def wait(self, timeout: float | None = None) -> None:
        """Block the host until the operation completes; raise its error if it failed.

        ``timeout`` in seconds; ``None`` means ``AL_TIMEOUT`` if set, else forever.  On
        timeout raises ``al.TimeoutError`` and the request stays pending (wait again later).
        A failed operation raises ``al.OperationError`` whose ``__cause__`` is the exception
        its state raised, with the engine-side traceback.
        """
        if not self._done:
            self._engine.wait(self, timeout)
        if self._error is not None:
            self._raise_error()

    def test(self) -> bool:
        """Return True if the operation has completed, False if not; never blocks.

        Unlike ``MPI_Test`` there is no "one call late": the first call that observes
        completion returns True (each call runs one engine pass when the engine is free).
        A False return first yields the GIL (``os.sched_yield``), so a busy ``test`` loop
        does not starve the other threads.  Raises the operation's error, like ``wait``,
        once it has failed.
        """
        if not self._done:
            self._engine.poll()
            if not self._done:
                os.sched_yield()
                return False
        if self._error is not None:
            self._raise_error()
        return True

    def wait_on_stream(self, stream=None) -> None:
        """Order ``stream`` (default: the operation's stream) after this operation.

        For stream-bound states that expose ``completion_event()`` the host does not block:
        ``stream.wait_event(event)`` is enqueued and the call returns.  Host-only operations
        have nothing a stream could wait on, so this waits on the host (``wait()``), which
        orders any work enqueued afterwards as well.
        """
        event = self.state.completion_event()
        target = stream if stream is not None else self.state.compute_stream
        if event is None or target is None:
            self.wait()
            return
        if self._done and self._error is not None:
            self._raise_error()
        target.wait_event(event)
        self.on_stream = True

    def add_done_callback(self, fn: Callable[[Request], object]) -> None:
        """Call ``fn(request)`` once, when the operation completes or fails.

        Runs on whichever thread observes completion: the engine thread, or a thread
        driving the engine inside ``wait``/``test``; at once, on this thread, if the
        request is already done.  Callbacks run in the order they were added.  A callback
        must be quick and must not wait for another request (the thread running it may be
        the one that would have to drive it); it may start new operations.  An exception
        it raises is reported as a ``RuntimeWarning`` and does not affect the request.
        """
        if self._callbacks is None:
            with _callbacks_made:
                if self._callbacks is None:
                    self._callbacks = []
        self._callbacks.append(fn)
        if self._done:
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        # pop(0) is atomic: when ``_finish`` and ``add_done_callback`` race to run them,
        # each callback still runs exactly once.
        callbacks = self._callbacks
        outer, _running_callbacks.active = in_done_callback(), True
        try:
            while True:
                try:
                    fn = callbacks.pop(0)
                except IndexError:
                    return
                try:
                    fn(self)
                except Exception as exc:  # noqa: BLE001 - a user's callback must not kill a pass
                    warnings.warn(f"aluminum: a done callback of {self!r} raised "
                                  f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
        finally:
            _running_callbacks.active = outer

    def _finish(self, error: BaseException | None = None) -> bool:
        """Mark the request complete, failed with ``error`` if given; False if it already was.

        ``error`` is raised as is by ``wait``/``test``; states' own exceptions go through
        ``_fail`` so that they arrive wrapped in ``al.OperationError``.  Runs the done
        callbacks.
        """
        if self._done:
            return False
        if error is not None:
            self._error = error
        mark_done(self)
        if self._callbacks is not None:
            self._run_callbacks()
        return True

    def _fail(self, cause: BaseException) -> bool:
        """Fail with ``al.OperationError`` chained to ``cause`` (keeps its traceback)."""
        error = OperationError(f"{self.state.name} (request #{self.seq}) failed: "
                               f"{type(cause).__name__}: {cause}")
        error.__cause__ = cause
        error.__suppress_context__ = True
        return self._finish(error)

    def _block(self, timeout: float | None) -> bool:
        """Sleep until complete; False if ``timeout`` seconds passed first."""
        return wait_done(self, timeout)

    def _raise_error(self):
        # Fresh traceback each time, so repeated waits do not grow the stored one.
        raise self._error.with_traceback(None)

    def __repr__(self) -> str:
        status = "pending" if not self._done else ("failed" if self._error else "complete")
        return f"<Request #{self.seq} {self.state.name} {status}>"


def wait_all(requests: Iterable[Request], timeout: float | None = None) -> None:
    """Wait for every request; then raise the first failure, if any.

    All requests are waited for before an error is raised, so every buffer is safe to reuse
    afterwards.  ``timeout`` bounds the whole call (``al.TimeoutError`` if exceeded).
    """
    requests = list(requests)
    deadline = None if timeout is None else time.monotonic() + timeout
    for request in requests:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not request._done:
            request._engine.wait(request, remaining)
    for request in requests:
        if request._error is not None:
            request._raise_error()


def wait_any(requests: Iterable[Request], timeout: float | None = None) -> int:
    """Block until at least one request has completed; return the index of one that has
    (the lowest such index).  If that request failed, raise its error, as ``wait`` would.

    ``timeout`` in seconds (``None``: ``AL_TIMEOUT`` if set, else forever); raises
    ``al.TimeoutError`` if none completes in time.  Like ``MPI_Waitany``, the other
    requests stay pending.
    """
    requests = list(requests)
    if not requests:
        raise ArgumentError("requests: expected at least one Request, got none")
    for index, request in enumerate(requests):
        if request.done:
            request.wait()
            return index
    engine = requests[0]._engine
    limit = engine.config.timeout_s if timeout is None else timeout
    deadline = None if limit is None else time.monotonic() + limit
    woken = Completion()
    for request in requests:
        request.add_done_callback(lambda _request: woken.set())
    while True:
        for index, request in enumerate(requests):
            if request.done:
                request.wait()
                return index
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise TimeoutError(f"wait_any: none of {len(requests)} requests "
                               f"({', '.join(f'#{r.seq}' for r in requests)}) completed "
                               f"within {limit:g} s; they are still pending")
        engine.drive_until(woken.is_set, remaining)
        # The engine thread drives when no caller does; states that progress alone (GPU
        # work) are polled by ``done`` above, hence the bounded sleep.
        woken.wait(1e-3 if remaining is None else min(remaining, 1e-3))


def test_all(requests: Iterable[Request]) -> bool:
    """Return True if every request has completed (one engine pass first, when free).

    Yields the GIL before returning False, like ``Request.test``.

    Once all have completed, raises the first failure, if any, like ``wait_all``.
    """
    requests = list(requests)
    for engine in {id(r._engine): r._engine for r in requests if not r._done}.values():
        engine.poll()
    if not all(r._done for r in requests):
        os.sched_yield()
        return False
    for request in requests:
        if request._error is not None:
            request._raise_error()
    return True
