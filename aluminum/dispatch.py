"""Forward a validated operation to its backend: blocking on this thread, or to the engine."""
from __future__ import annotations

from . import debug, watchdog
from .core import trace
from .engine.progress import submit, wait_started


def run(comm, op: str, state_class: type, nbytes: int, blocking: bool, args: tuple,
        detail: tuple | None = None):
    """Run ``op`` with ``state_class``; return a Request when nonblocking.

    ``args`` are the State constructor's arguments after ``comm``: ``(stream, ...)``;
    ``detail`` is the request's ``(function, argument)`` naming late ranks (the caller
    counted its arrival).  A blocking call on a host backend first lets the operations
    submitted before it on ``comm`` start (``progress.wait_started``), so that every rank
    starts its collectives in one order.
    """
    if trace.ENABLED:
        trace.api_call(op, comm, nbytes, state_class.name, blocking)
    if debug.ENABLED:
        debug.check(comm, op, state_class.name, args)
    if blocking and comm.backend.uses_streams:
        state_class.run_blocking(comm, *args)
        return None
    if blocking and not watchdog.ENABLED:
        wait_started(comm)
        state_class.run_blocking(comm, *args)
        return None
    request = submit(state_class(comm, *args))
    request.detail = detail
    if blocking:   # through the engine, so that AL_TIMEOUT can end a stuck collective
        request.wait()
        return None
    return request


def checks_enabled() -> bool:
    """True when every call must take the full path (AL_DEBUG cross-rank checks, the
    AL_TIMEOUT watchdog)."""
    return debug.ENABLED or watchdog.ENABLED


def blocking_runner(comm, state_class: type, args: tuple):
    """What later blocking runs of the same call may call instead of ``run`` (after
    ``progress.wait_started``): the state's blocking call bound to its arguments
    (``State.blocking_call``); None where every run must take ``run``'s path (tracing,
    AL_DEBUG, AL_TIMEOUT, stream-bound backends)."""
    if trace.ENABLED or checks_enabled() or comm.backend.uses_streams:
        return None
    return state_class.blocking_call(comm, *args)


def array_runner(comm, state_class: type, args: tuple):
    """What blocking runs on new arrays of the kind ``args`` were checked to be may call
    instead of ``run`` (after ``progress.wait_started``): ``state_class.array_call`` for
    ``args``; None where every run must take ``run``'s path (as ``blocking_runner``) or
    the state has no such call."""
    if trace.ENABLED or checks_enabled() or comm.backend.uses_streams:
        return None
    return state_class.array_call(comm, *args)
