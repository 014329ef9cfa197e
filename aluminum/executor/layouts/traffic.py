"""Counting the bytes a rank's redistributions, placement's transfers and the executor's
``allreduce`` ops send and receive, from the buffers the runtime hands to aluminum's calls
(not from the plan):
``with count_traffic() as t: ...`` then ``t.sent``, ``t.received`` and ``t.calls``.

A call counts as its direct algorithm moves data: ``alltoallv``/``multisendrecv`` the
blocks to and from other ranks; ``allgatherv`` this rank's block to each other rank and
the others' blocks to it; ``reduce_scatterv`` this rank's summands of the other blocks out
and the others' summands of its block in; ``allreduce`` that reduce-scatter then that
allgather over ``array_split`` blocks of the buffer (what a bandwidth-optimal algorithm
moves, whichever one the selector picks); a ``bcast`` its root's buffer to each other
rank, a ``reduce`` each summand to the root.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Iterator

from .mesh import split_bounds

_lock = threading.Lock()
# The Traffic objects counting now (every thread's calls count: an executor runs ops on its
# pool); empty when nothing counts, which a hot path may check before calling ``record``.
active: list = []


@dataclass
class Traffic:
    """Bytes this rank sent and received, and ``calls``: (call, group size, sent,
    received) for each aluminum call made."""

    sent: int = 0
    received: int = 0
    calls: list = field(default_factory=list)


@contextlib.contextmanager
def count_traffic() -> Iterator[Traffic]:
    """Count what the redistributions run inside the block move on this rank (any thread:
    a ParallelExecutor runs them on its workers)."""
    traffic = Traffic()
    with _lock:
        active.append(traffic)
    try:
        yield traffic
    finally:
        with _lock:
            active.remove(traffic)


def record_allreduce(elements: int, itemsize: int, group: int, rank: int) -> None:
    """``record`` an allreduce of ``elements`` over ``group`` ranks from ``rank`` (module
    docstring: a reduce-scatter then an allgather of ``array_split`` blocks)."""
    if not active or group == 1:
        return
    start, stop = split_bounds(elements, group)[rank]
    block = stop - start
    moved = ((elements - block) + (group - 1) * block) * itemsize
    record("allreduce", group, moved, moved)


def record(call: str, group: int, sent: int, received: int) -> None:
    if not active:      # (nothing counts: no lock taken)
        return
    with _lock:
        for traffic in active:
            traffic.sent += sent
            traffic.received += received
            traffic.calls.append((call, group, sent, received))
