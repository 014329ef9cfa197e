"""Bounded waits for the collectives that set things up (communicators, shared windows,
``AL_DEBUG``'s exchange, finalize): a rank that never arrives makes the others raise
``al.TimeoutError`` within ``AL_TIMEOUT`` instead of hanging in a blocking MPI call.

Each wait is a nonblocking collective polled against the deadline.  Without ``AL_TIMEOUT`` it
waits forever, but warns once after ``AL_STALL_WARN_S`` (60 s) naming what it waits for.

Why two rounds before a blocking collective (``enter``): a rank that gave up leaves its
nonblocking collective pending, and a late peer's first round matches it and completes; the
late peer then waits in the second round, which the rank that gave up never posts, and times
out too, instead of entering the blocking collective alone.  (A rank frozen exactly between
the two rounds can still strand a peer: no protocol over unreliable peers closes that.)
After a timeout the MPI communicator used is out of step with its peers: callers mark what
they were building as unusable.
"""
from __future__ import annotations

import os
import time
import warnings
from typing import Callable

import numpy as np
from mpi4py import MPI

from ...core import trace
from ...core.errors import OperationError, TimeoutError
from ...engine.progress import get_engine

_POLL_MIN_S, _POLL_MAX_S = 20e-6, 2e-3
_stranded: list = []   # communicators with a timed-out collective still pending on them


def stranded_any() -> bool:
    """True once any bounded wait of this process timed out."""
    return bool(_stranded)


def stranded(comm) -> bool:
    """True if a bounded wait timed out on ``comm``: a collective is still pending on it, so
    it must never be freed (Open MPI would progress the freed communicator and crash)."""
    return any(comm is other or comm == other for other in _stranded)


def limits() -> tuple[float | None, float]:
    """``(AL_TIMEOUT or None, AL_STALL_WARN_S)`` in seconds."""
    config = get_engine().config
    return config.timeout_s, config.stall_warn_s


def wait(comm: MPI.Comm, request: MPI.Request, what: str, timeout: float | None = None,
         missing: Callable[[], str] | None = None,
         give_up: Callable[[float], str | None] | None = None) -> None:
    """Poll ``request``, a nonblocking collective on ``comm``, until it completes; raise
    ``al.TimeoutError`` naming ``what`` after ``timeout`` seconds (default ``AL_TIMEOUT``;
    None: never), leaving ``comm`` ``stranded``.  ``missing()`` words which ranks never
    arrived, when someone knows (shared-memory arrival counters).  ``give_up(waited)``,
    asked at every poll, may end the wait sooner: the reason it returns goes into the
    error."""
    default, stall_s = limits()
    limit = default if timeout is None else timeout
    start = time.monotonic()
    pause = _POLL_MIN_S
    warned = False
    while not _test(request, what):
        waited = time.monotonic() - start
        early = None if give_up is None else give_up(waited)
        if early is not None or (limit is not None and waited >= limit):
            who = missing() if missing is not None else (
                "which ranks never arrived is unknown here (a nonblocking collective cannot "
                "tell); rerun with AL_TRACE to compare the ranks' last operations")
            if early is not None:
                error = TimeoutError(f"{what}: {early}")
            else:
                error = TimeoutError(f"{what}: not every rank arrived within "
                                     f"{'AL_TIMEOUT=' if timeout is None else 'timeout='}"
                                     f"{limit:g} s; {who}")
            _stranded.append(comm)
            dumped = trace.dump_flight_record(str(error))
            if dumped is not None:
                error.args = (f"{error}; flight record: {dumped}",)
            raise error
        if limit is None and not warned and waited >= stall_s:
            warned = True
            warnings.warn(f"aluminum: stalled {waited:.0f} s in {what}: some rank has not "
                          f"arrived (set AL_TIMEOUT to turn this into an error)",
                          RuntimeWarning, stacklevel=3)
        if pause > _POLL_MIN_S:
            time.sleep(pause)
        else:
            os.sched_yield()
        pause = min(pause * 2, _POLL_MAX_S)


def _test(request: MPI.Request, what: str) -> bool:
    try:
        return request.Test()
    except MPI.Exception as exc:   # e.g. matched a different collective of a peer
        raise OperationError(f"{what}: MPI failed: {exc.Get_error_string()} (the ranks' "
                             f"collectives on this communicator are out of step)") from exc


def agree(comm: MPI.Comm, what: str, value: int, timeout: float | None = None,
          missing: Callable[[], str] | None = None,
          give_up: Callable[[float], str | None] | None = None) -> int:
    """The minimum of every rank's ``value`` over ``comm``, bounded like ``wait``."""
    mine, result = np.array([value], np.int64), np.zeros(1, np.int64)
    wait(comm, comm.Iallreduce(mine, result, MPI.MIN), what, timeout, missing, give_up)
    return int(result[0])


def enter(comm: MPI.Comm, what: str, missing: Callable[[], str] | None = None) -> None:
    """Return once every rank of ``comm`` is about to make the same blocking collective
    (two rounds: see the module docstring); bounded like ``wait``."""
    wait(comm, comm.Ibarrier(), what, None, missing)
    wait(comm, comm.Ibarrier(), what, None, missing)


def dup(parent: MPI.Comm, what: str) -> MPI.Comm:
    """``parent.Dup()``, bounded like ``wait`` (``MPI_Comm_idup``, then a second round)."""
    comm, request = parent.Idup()
    wait(parent, request, what)
    wait(comm, comm.Ibarrier(), what)
    return comm
