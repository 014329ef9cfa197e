"""Barrier through the node's arrival board: no message, one store and a few loads.

Every rank counts each collective it enters on a communicator on the node's arrival board
(aluminum/watchdog.py: a plan counts before it runs or starts, for the timeouts' and stall
warnings' "ranks that never arrived"), and collectives are entered in one order on every
rank.  A rank that has entered barrier number ``k`` of a communicator has therefore stored
``k``, and every rank has entered it once every rank's count reached ``k``: this barrier
only reads its own count and waits for the others' (board_wait.py for the blocking form,
``step`` for the engine's).  On two ranks of one node that is a cache line crossing each way,
where ``MPI_Barrier`` sends a message each way through MPI's shared-memory transport.  A
rank may give its slot back (free or drop the communicator) as soon as it has left the
barrier; the slot's generation then changes, which counts as having arrived
(core/board_cells.py), so a peer that had not looked yet does not wait on the reset count.

What surprises people:
- it needs every rank on this node and the communicator's arrival counters (a
  communicator made when a rank had no board slot left has none); ``automatic`` takes it
  only there, and ``algo="shared_memory"`` elsewhere raises ``UnsupportedError``;
- it matches only other ranks' barriers through the board, as any algorithm matches only
  itself: every rank of a barrier must run the same algorithm (``automatic`` makes the same
  choice everywhere);
- a slot given back counts as arrived, so a peer that skips the barrier and drops the
  communicator without ``free()`` lets it end once the communicator is collected, where
  MPI's barrier would wait forever (a peer's ``free()`` gives the slot back only after
  this rank has come to ``free()`` too: it is collective);
- while it waits it keeps MPI progressing (``MPI_Iprobe``) and yields the core, so a peer
  held in a blocking send that only this rank's progress completes (into an ``Irecv``
  posted before the barrier) still gets there, as with MPI's own barrier.
"""
from __future__ import annotations

import functools

from mpi4py import MPI

from ....core.board_cells import count_of, reached
from ....core.errors import UnsupportedError
from ....engine.state import Action, State
from .board_wait import BoardWait

__all__ = ["SharedMemoryBarrier"]


def node_cells(comm) -> tuple[list, list]:
    """Every rank's cell of ``comm``'s slot on the node's board and the slot's generation
    (rank order, ``ArrivalCounters.node_cells``); raises ``UnsupportedError`` where the
    barrier cannot run on ``comm``."""
    arrivals = comm.arrivals
    found = None if arrivals is None else arrivals.node_cells()
    if found is not None and comm.local_size == comm.size:
        return found
    if comm.local_size != comm.size:
        why = (f"needs every rank on one node; this communicator has {comm.size} ranks, "
               f"{comm.local_size} of them on this node")
    else:
        why = ("needs the communicator's arrival counters on the node's board, and this "
               "one has none (made when a rank had no board slot left, or freed)")
    raise UnsupportedError(f"algo: barrier/shared_memory {why} (use mpi_passthrough)")


class SharedMemoryBarrier(State):
    """Barrier for communicators whose ranks all share one node: wait until every rank's
    count on the arrival board reached this rank's (counted before the state is made)."""

    name = "barrier/shared_memory"
    single_node = True        # the selector falls back to the default on multi-node
    needs_arrivals = True     # communicators, and on those without arrival counters

    def __init__(self, comm, stream, cells: tuple | None = None) -> None:
        self.cells, self.generations = node_cells(comm) if cells is None else cells
        self.comm, self.mpi = comm, comm.mpi_comm   # (the engine queues states by comm)
        self.number = count_of(self.cells[comm.rank][0])

    def step(self) -> Action:
        number = self.number
        for cell, generation in zip(self.cells, self.generations):
            if not reached(cell[0], generation, number):
                self.mpi.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)   # (MPI's progress)
                return Action.CONTINUE
        return Action.COMPLETE

    @classmethod
    def run_blocking(cls, comm, stream) -> None:
        cls.blocking_call(comm, stream)()

    @classmethod
    def blocking_call(cls, comm, stream):
        return BoardWait(*node_cells(comm), comm.rank, comm.mpi_comm)

    @classmethod
    def fresh(cls, comm, stream):
        return functools.partial(cls, comm, stream, node_cells(comm))
