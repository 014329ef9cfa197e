"""Forward a validated operation to its backend: blocking on this thread, or to the engine."""
from __future__ import annotations

import functools

from . import debug, watchdog
from .core import trace
from .engine.progress import get_engine, submit, submit_made, wait_started_on


def run(comm, op: str, state_class: type, nbytes: int, blocking: bool, args: tuple,
        detail: tuple | None = None):
    """Run ``op`` with ``state_class``; return a Request when nonblocking.

    ``args`` are the State constructor's arguments after ``comm``: ``(stream, ...)``;
    ``detail`` is the request's ``(function, argument)`` naming late ranks (the caller
    counted its arrival).  A blocking call on a host backend first lets the operations
    submitted before it on ``comm`` start (``progress.wait_started_on``), so that every rank
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
        wait_started_on(comm)
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


def direct(comm) -> bool:
    """Whether repeated calls on ``comm`` may skip ``run``'s path, calling a prepared form
    of their State after ``progress.wait_started_on`` instead: not while tracing, with AL_DEBUG
    or AL_TIMEOUT, nor on stream-bound backends."""
    return not (trace.ENABLED or checks_enabled() or comm.backend.uses_streams)


def runner(comm, state_class: type, args: tuple, persistent=None):
    """What later blocking runs of the same call may call instead of ``run`` (where
    ``direct``, after ``progress.wait_started_on``): ``persistent.run`` (``State.persistent``'s
    object) where given, else the State's bound form (``State.blocking_call``).  Its
    exceptions become ``state_class.call_error``'s."""
    if persistent is not None:
        return persistent.run
    return state_class.blocking_call(comm, *args)


def starter(comm, state_class: type, args: tuple, persistent=None):
    """What later nonblocking runs of the same call may call instead of ``run`` (where
    ``direct``): a no-argument callable returning the Request of a run of ``persistent``
    (``State.persistent``'s object) where given, else of a new State from
    ``State.fresh``."""
    if persistent is not None:   # (the process's engine is made once and never replaced)
        return functools.partial(get_engine().submit, persistent.state())
    return functools.partial(submit_made, state_class.fresh(comm, *args))


def array_runner(comm, state_class: type, args: tuple):
    """What blocking runs on new arrays of the kind ``args`` were checked to be may call
    instead of ``run`` (after ``progress.wait_started_on``): ``state_class.array_call`` for
    ``args``; None where every run must take ``run``'s path (not ``direct``) or the state
    has no such call."""
    if not direct(comm):
        return None
    return state_class.array_call(comm, *args)


def array_starter(comm, state_class: type, args: tuple):
    """What nonblocking runs on new arrays of the kind ``args`` were checked to be may call
    instead of ``run`` (then submitting the State it returns): ``state_class.array_fresh``
    for ``args``; None where every run must take ``run``'s path (not ``direct``) or the
    state has no such form."""
    if not direct(comm):
        return None
    return state_class.array_fresh(comm, *args)
