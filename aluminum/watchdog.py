"""``AL_TIMEOUT``'s watchdog: a stuck collective raises ``al.TimeoutError`` naming the ranks
that never arrived, instead of hanging.

With ``AL_TIMEOUT`` or ``AL_STALL_WARN_S`` set (on every rank), every collective on the host backends runs through
the progress engine, blocking calls included (started, then waited for with the timeout):
an ``MPI_Allreduce`` stuck in C could never time out.  Each communicator whose ranks share
one node also keeps an arrival counter per rank in a small MPI-3 shared window, made with the
communicator: a rank bumps its own counter as it enters a collective there.  A wait that
times out reads every rank's counter straight from shared memory (no MPI call, so a stuck
peer cannot block the diagnosis): ranks whose count is below the operation's own never
arrived.  A communicator spanning nodes says so instead.

``AL_STALL_WARN_S`` alone turns the same machinery on without cutting anything off: a wait
that lasts that long warns once, naming the operation and the ranks that never arrived
(Horovod's stall inspector); blocking calls included, since they go through the engine.

With neither set none of this runs: no window, no counting, blocking calls stay direct (a
nonblocking ``wait()`` still warns after the default 60 s, naming only the operation).
"""
from __future__ import annotations

import os
from typing import Callable

import numpy as np

__all__ = ["ENABLED", "ArrivalCounters", "arrive"]

# (AL_STALL_WARN_S set explicitly asks for the stall warning's rank names, which need the
# counters, and for blocking calls to warn too, which needs them to go through the engine)
ENABLED = any(os.environ.get(name, "").strip() for name in ("AL_TIMEOUT", "AL_STALL_WARN_S"))

_KEY = "arrivals"   # comm.scratch
_SLOT_BYTES = 64    # one cache line per rank's counter


class ArrivalCounters:
    """Per-rank counts of collectives entered on one communicator, in shared memory."""

    def __init__(self, comm) -> None:
        self.rank, self.size = comm.rank, comm.size
        self.count = 0
        self.window = None
        self.views: list[np.ndarray] = []
        if comm.local_size != comm.size:   # shared memory cannot see other nodes
            return
        from mpi4py import MPI

        self.window = MPI.Win.Allocate_shared(_SLOT_BYTES, 1, comm=comm.local_comm)
        for peer in range(comm.size):
            memory, _ = self.window.Shared_query(peer)
            self.views.append(np.frombuffer(memory, np.int64, count=1))
        self.views[self.rank][0] = 0

    @staticmethod
    def of(comm) -> ArrivalCounters | None:
        """The communicator's counters (None when the watchdog is off for it)."""
        return comm.scratch(_KEY)

    def arrive(self) -> int:
        """Count one more collective entered by this rank; its number on this communicator."""
        self.count += 1
        if self.views:
            self.views[self.rank][0] = self.count
        return self.count

    def missing(self, number: int) -> str:
        """Which ranks had not entered collective ``number`` yet, in words."""
        if not self.views:
            return ("the ranks that never arrived are unknown: this communicator spans nodes, "
                    "and only ranks sharing memory can be watched")
        late = [peer for peer in range(self.size) if int(self.views[peer][0]) < number]
        if not late:
            return (f"every rank entered it (collective #{number} on this communicator): "
                    f"they are all inside it, e.g. with mismatched arguments")
        return (f"ranks that never arrived at collective #{number} on this communicator: "
                f"{late}")

    def close(self) -> None:
        window, self.window = self.window, None
        self.views = []
        if window is None:
            return
        from mpi4py import MPI

        if not MPI.Is_finalized():
            window.Free()


def attach(comm) -> None:
    """Give a new communicator its counters when every rank runs with ``AL_TIMEOUT`` or
    ``AL_STALL_WARN_S`` (collective: decided together, so ranks that disagree cannot deadlock on the window)."""
    from .backends.mpi import rendezvous

    if rendezvous.agree(comm.mpi_comm, f"{type(comm).__name__}() (agreeing on AL_TIMEOUT/AL_STALL_WARN_S)",
                        int(ENABLED)):
        comm.scratch(_KEY, lambda: ArrivalCounters(comm))


def arrive(comm) -> Callable[[], str] | None:
    """Record that this rank entered a collective on ``comm``; returns what to add to a
    timeout's message about it (None when the watchdog is off for ``comm``)."""
    counters = ArrivalCounters.of(comm)
    if counters is None:
        return None
    number = counters.arrive()
    return lambda: counters.missing(number)
