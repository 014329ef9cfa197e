"""A one-shot completion flag that is cheap until a thread blocks on it.

``set()`` and ``is_set()`` are plain attribute writes and reads; the ``threading.Event``
behind ``wait()`` is made only when a thread actually has to sleep.  Most completions here
are set and checked on one thread and never waited on, and a real Event costs several
microseconds to make and to set.  ``Request`` (engine) and the host stream runtime's events
and flags are built on it.
"""
from __future__ import annotations

import threading

__all__ = ["Completion", "mark_done", "wait_done"]

_lock = threading.Lock()   # guards only the creation of waiters' Events


class Completion:
    """``set()`` once from any thread; ``wait(timeout)`` blocks until then."""

    __slots__ = ("_done", "_event")

    def __init__(self) -> None:
        self._done = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._done

    def set(self) -> None:
        mark_done(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set; False if ``timeout`` seconds passed first."""
        return wait_done(self, timeout)


def mark_done(holder) -> None:
    """Set ``holder._done`` and wake its waiters: the one implementation for every object
    with ``_done``/``_event`` attributes (``Completion``, ``Request``)."""
    holder._done = True
    event = holder._event
    if event is not None:
        event.set()


def wait_done(holder, timeout: float | None) -> bool:
    """Block until ``holder._done``; False if ``timeout`` seconds passed first."""
    if holder._done:
        return True
    event = holder._event
    if event is None:
        with _lock:
            if holder._event is None:
                holder._event = threading.Event()
            event = holder._event
    # mark_done writes _done before reading _event: either it saw our Event or we see _done.
    if holder._done:
        return True
    return event.wait(timeout)
