"""The progress engine's driver token: the lock whoever runs engine passes holds.

Every small nonblocking call takes and gives back the token twice (when its operation is
started and when it is waited for), so the token is taken where it is most often tried.
Compiled, it is a flag in a C field that the GIL guards: every caller holds the GIL, and
testing and setting the flag is one step no other Python thread can come between, so
``take()`` and ``give()`` cost a field read and write.  (A ``PyThread`` lock's
non-blocking acquire reads the monotonic clock and converts a deadline on every call in
CPython 3.11, a fifth of a repeated small nonblocking call's time here.)  Uncompiled it is
a ``threading.Lock``; both behave the same.

What surprises people: a blocking ``take_within`` (the engine's drain and shutdown, never a
call's hot path) polls the flag, sleeping between looks with the GIL released, from
``FIRST_NAP_S`` doubling up to ``LONGEST_NAP_S``, and runs Python's signal handlers
between them, so Ctrl-C still interrupts a thread waiting for the token (a
``KeyboardInterrupt`` leaves it untaken); it notices a give-back that late.
"""
from __future__ import annotations

import threading
import time

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from ..core import pure_cython as cython

__all__ = ["DriverToken"]

FIRST_NAP_S = 20e-6      # a blocking take's first sleep between two looks at the flag
LONGEST_NAP_S = 1e-3     # ... doubling up to this
_clock = time.perf_counter


@cython.cclass
class DriverToken:
    """A non-reentrant lock: ``take()`` without blocking, ``take_within(timeout)``,
    ``give()``, ``held()``."""

    def __init__(self) -> None:
        if not cython.compiled:
            self._py = threading.Lock()
        self._held = False

    def take(self) -> cython.bint:
        """Take the token if it is free; whether this call took it."""
        if cython.compiled:
            if self._held:
                return False
        elif not self._py.acquire(False):
            return False
        self._held = True
        return True

    @cython.locals(nap=cython.double, micros=cython.int)
    def take_within(self, timeout) -> cython.bint:
        """Take the token, waiting up to ``timeout`` seconds for it (None or negative:
        as long as it takes); whether this call took it."""
        deadline = None if timeout is None or timeout < 0 else _clock() + timeout
        nap = FIRST_NAP_S
        while True:
            if self.take():
                return True
            wait = nap if deadline is None else min(nap, deadline - _clock())
            if wait <= 0:
                return False
            if cython.compiled:
                micros = int(wait * 1e6) + 1
                with cython.nogil:
                    usleep(micros)
                PyErr_CheckSignals()
            elif self._py.acquire(timeout=wait):
                self._held = True
                return True
            nap = min(2 * nap, LONGEST_NAP_S)

    def give(self) -> None:
        """Give the token back (the caller holds it; RuntimeError where nobody does)."""
        if not self._held:
            raise RuntimeError("the progress engine's driver token is not held")
        self._held = False
        if not cython.compiled:
            self._py.release()

    def held(self) -> cython.bint:
        """Whether some thread holds the token now (a hint: it may change at once)."""
        return self._held
