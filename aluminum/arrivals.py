"""The part of the arrival counters that every run of a collective touches, compiled.

``Arrivals`` is this rank's count of the collectives it entered on one communicator, stored
in the slot of the node's arrival board that its peers read; ``watchdog.ArrivalCounters``
adds who reads the counts and how (timeouts, stall warnings, roll calls across nodes).  A
plan's run calls ``enter`` before the operation and ``leave`` after it: compiled, both are C
calls into this class's fields rather than Python method calls.

What surprises people: ``count`` keeps counting after the slot is given back (``_mine``
None), so numbers stay increasing on a communicator freed under a run; nothing reads them.
The slot's cell holds the count under the slot's generation (core/board_cells.py).
"""
from __future__ import annotations

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from .core import pure_cython as cython

from .core.board_cells import COUNT_BITS, generation_of

__all__ = ["Arrivals"]


@cython.cclass
class Arrivals:
    """The count of collectives entered on one communicator, stored in ``mine[slot]`` (a
    memoryview of int64 on the node's shared board), and the blocking run in progress."""

    __slots__ = ("count", "_inside_number", "_inside_plan", "_mine", "_counts", "_slot",
                 "_base", "__weakref__")

    def __init__(self, mine, slot: int) -> None:
        self.count = 0
        self._inside_number, self._inside_plan = 0, None   # the blocking run in progress
        self._mine, self._slot = mine, slot
        self._counts = mine   # (compiled: a typed view of ``mine``, stored into directly)
        # The cell's generation bits, kept while the slot is this communicator's.
        self._base = 0 if mine is None else generation_of(mine[slot]) << COUNT_BITS

    def arrive(self) -> int:
        """Count one more collective entered by this rank; its number on this communicator."""
        count = self.count = self.count + 1
        if self._counts is not None:
            self._counts[self._slot] = self._base + count
        return count

    def detach(self):
        """Stop storing counts (the slot is given back); the memoryview they went to."""
        mine = self._mine
        self._mine = self._counts = None
        return mine

    @property
    def inside(self) -> tuple | None:
        """``(number, plan)`` of the blocking run in progress (``enter``), else None."""
        plan = self._inside_plan
        return None if plan is None else (self._inside_number, plan)

    def enter(self, plan) -> int:
        """``arrive()``, and mark ``plan``'s blocking run in progress (for the stall
        monitor) until ``leave()``; its number.  (Two fields, not a tuple: a blocking run
        allocates nothing here.)"""
        number = self.arrive()
        self._inside_number, self._inside_plan = number, plan
        return number

    def leave(self) -> None:
        """The blocking run ``enter`` marked has ended."""
        self._inside_plan = None
