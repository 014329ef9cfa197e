"""The shared-memory barrier's wait, compiled: poll every rank's count on the arrival board.

``BoardWait(cells, generations, rank, mpi_comm)`` holds where each rank's count of one
communicator lies on the node's arrival board and the generation of its slot
(``ArrivalCounters.node_cells``, core/board_cells.py).  Called, it reads this rank's own
count - the number of the collective it has just entered, which a plan counts before it
runs - and returns once every rank's count has reached that number or its slot has been
given back since.  It is the prepared call of a blocking ``barrier/shared_memory`` run
(shared_memory_barrier.py).

How it waits: it polls with the GIL held for ``SPIN_POLLS`` rounds (a peer usually arrives
within microseconds, and giving the GIL or the core away costs more than that), then without
the GIL, and between polls it yields the core (``sched_yield``: with more ranks than cores
a spinning rank would delay the very peer it waits for) and calls ``MPI_Iprobe`` on the
communicator, which drives MPI's progress as MPI's own barrier would: a peer may be held in
a blocking send that only this rank's progress completes (into a large ``Irecv`` posted
before the barrier), and the progress engine's thread may need the GIL to step the
operation a peer waits for.  Every ``CHECK_SECONDS`` it takes the GIL back to let Python handle signals, so
Ctrl-C ends a wait that MPI's barrier would sit through.

What surprises people: counts are read with acquire loads and a rank's count is stored after
everything it wrote before entering the barrier, so shared memory written before the
barrier is visible after it, as with MPI's barrier; a peer that never comes keeps the call
waiting (without ``AL_TIMEOUT``, as ``MPI_Barrier`` would; under it, barriers run through
the engine, which ends them).
"""
from __future__ import annotations

import os

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from ....core import pure_cython as cython
import numpy as np
from mpi4py import MPI

from ....core.board_cells import COUNT_BITS, count_of, reached
from ....core.errors import OperationError
from ....engine.direct import DirectCall
from ..passthrough.native_calls import probe_function

__all__ = ["BoardWait", "SPIN_POLLS", "CHECK_SECONDS"]

assert COUNT_BITS == 40, "board_wait.pxd's C code reads a cell as generation << 40 | count"

# Polls with the GIL held before it is released, about a microsecond: with more ranks than
# cores a longer spin keeps the core from the peer waited for (2000 polls: 3 and 4 ranks on
# two cores took 60 us a barrier, against MPI's 6-7; 20 polls: 5-8 us).
SPIN_POLLS = 20
CHECK_SECONDS = 0.05     # how often a long wait takes the GIL back for signals


@cython.cclass
class BoardWait(DirectCall):
    """Wait until every rank's count in ``cells`` reached this rank's (``cells[rank]``),
    or its slot left ``generations``."""

    __slots__ = ("cells", "generations", "n", "mine", "rank", "probe", "source", "tag",
                 "comm", "held", "mpi_comm", "counts", "generation_list")

    def __init__(self, cells: list, generations: list, rank: int, mpi_comm) -> None:
        self.counts = [np.frombuffer(cell, np.int64) for cell in cells]
        self.generation_list = list(generations)
        addresses = np.array([count.ctypes.data for count in self.counts], np.uintp)
        expected = np.array(generations, np.int64)
        self.held = (cells, addresses, expected)
        self.cells, self.n = int(addresses.ctypes.data), len(cells)
        self.generations = int(expected.ctypes.data)
        self.rank, self.mine = rank, int(addresses[rank])
        self.mpi_comm = mpi_comm
        self.probe = probe_function() or 0   # (0: not compiled, or no such C call found)
        self.source, self.tag = MPI.ANY_SOURCE, MPI.ANY_TAG
        self.comm = MPI._handleof(mpi_comm) if self.probe else 0

    @cython.locals(number="long long", status=cython.int, code=cython.int)
    def call(self) -> None:
        if not (cython.compiled and self.probe):
            self._wait_in_python()
            return
        number = _al_count(self.mine)
        if _al_spin(self.cells, self.generations, self.n, number, SPIN_POLLS):
            return
        code = 0
        while True:   # (the GIL released inside, for up to CHECK_SECONDS a time)
            status = _al_wait_yielding(self.cells, self.generations, self.n, number,
                                       self.probe, self.source, self.tag, self.comm,
                                       CHECK_SECONDS, cython.address(code))
            if status == 1:
                return
            if status < 0:
                raise OperationError(f"barrier/shared_memory: MPI_Iprobe (keeping MPI "
                                     f"progressing while waiting) failed: "
                                     f"{MPI.Get_error_string(code)}")
            PyErr_CheckSignals()

    def _wait_in_python(self) -> None:
        counts, generations = self.counts, self.generation_list
        number = count_of(counts[self.rank][0])
        polls = 0
        while not all(reached(count[0], generation, number)
                      for count, generation in zip(counts, generations)):
            polls += 1
            if polls > 50:
                self.mpi_comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
                os.sched_yield()
