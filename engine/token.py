"""The progress engine's driver token: the lock whoever runs engine passes holds.

Every small nonblocking call takes and gives back the token twice (when its operation is
started and when it is waited for), so the token is taken where it is most often tried:
compiled, ``take()`` and ``give()`` are C calls on a ``PyThread`` lock, where
``threading.Lock.acquire(False)`` would parse its arguments on every call.  Uncompiled it is
a ``threading.Lock``; both behave the same.

What surprises people: a blocking ``take_within`` waits in slices of ``SLICE_S`` with the
GIL released and runs Python's signal handlers between them, so Ctrl-C still interrupts a
thread waiting for the token (a ``KeyboardInterrupt`` leaves it untaken).
"""
from __future__ import annotations

import threading
import time

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from ..core import pure_cython as cython

__all__ = ["DriverToken"]

SLICE_S = 0.05     # a blocking take checks for signals this often
_clock = time.perf_counter


@cython.cclass
class DriverToken:
    """A non-reentrant lock: ``take()`` without blocking, ``take_within(timeout)``,
    ``give()``, ``held()``."""

    def __init__(self) -> None:
        if cython.compiled:
            self._lock = PyThread_allocate_lock()
            if not self._lock:
                raise MemoryError("could not allocate the progress engine's driver token")
        else:
            self._py = threading.Lock()
        self._held = False

    def __dealloc__(self) -> None:
        if cython.compiled and self._lock:
            PyThread_free_lock(self._lock)

    def take(self) -> cython.bint:
        """Take the token if it is free; whether this call took it."""
        if cython.compiled:
            if PyThread_acquire_lock(self._lock, NOWAIT_LOCK) != PY_LOCK_ACQUIRED:
                return False
        elif not self._py.acquire(False):
            return False
        self._held = True
        return True

    @cython.locals(wait=cython.double, status=cython.int, micros=cython.int)
    def take_within(self, timeout) -> cython.bint:
        """Take the token, waiting up to ``timeout`` seconds for it (None or negative:
        as long as it takes); whether this call took it."""
        deadline = None if timeout is None or timeout < 0 else _clock() + timeout
        while True:
            if self.take():
                return True
            wait = SLICE_S if deadline is None else min(SLICE_S, deadline - _clock())
            if wait <= 0:
                return False
            if cython.compiled:
                micros = int(wait * 1e6)
                with cython.nogil:
                    status = PyThread_acquire_lock_timed(self._lock, micros, 0)
                if status == PY_LOCK_ACQUIRED:
                    self._held = True
                    return True
                PyErr_CheckSignals()
            elif self._py.acquire(timeout=wait):
                self._held = True
                return True

    def give(self) -> None:
        """Give the token back (the caller holds it; RuntimeError where nobody does)."""
        if not self._held:
            raise RuntimeError("the progress engine's driver token is not held")
        self._held = False
        if cython.compiled:
            PyThread_release_lock(self._lock)
        else:
            self._py.release()

    def held(self) -> cython.bint:
        """Whether some thread holds the token now (a hint: it may change at once)."""
        return self._held
