"""What a cell of the node's arrival board holds: a communicator's count of collectives,
and the generation of the slot it lies in.

A process's slot on the board serves one communicator at a time (aluminum/watchdog.py).
When the slot is given back its count restarts at 0, and the generation goes up by one, so
that a peer still waiting on the old communicator's count (a barrier through the board,
backends/mpi/algorithms/shared_memory_barrier.py) sees that the slot was let go, which it
only is once the rank has left every collective it entered there, rather than a count of 0
that would keep it waiting.  (A communicator dropped without ``free()`` gives its slot
back at garbage collection, with no collective to hold it until its peers have seen its
last count.)

A cell is ``generation << COUNT_BITS | count``: counts below 2**40, generations modulo
2**22, so a cell stays a positive int64.
"""
from __future__ import annotations

__all__ = ["COUNT_BITS", "count_of", "generation_of", "given_back", "reached"]

COUNT_BITS = 40
_COUNT_MASK = (1 << COUNT_BITS) - 1
_GENERATIONS = 1 << 22


def count_of(cell: int) -> int:
    """The count a cell holds."""
    return int(cell) & _COUNT_MASK


def generation_of(cell: int) -> int:
    """The generation of the slot a cell lies in."""
    return int(cell) >> COUNT_BITS


def given_back(cell: int) -> int:
    """The cell of a slot given back: count 0, the next generation."""
    return ((generation_of(cell) + 1) % _GENERATIONS) << COUNT_BITS


def reached(cell: int, generation: int, number: int) -> bool:
    """Whether the rank whose cell this is has entered collective ``number`` of the
    communicator that held its slot in ``generation``: its count reached it, or the slot
    has been given back since."""
    return count_of(cell) >= number or generation_of(cell) != generation
