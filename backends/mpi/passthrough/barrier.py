"""Barrier by calling MPI: ``MPI_Barrier`` when blocking, ``MPI_Ibarrier`` when not
(``MPI_Barrier_init`` for a plan's starts).

State arguments: ``(comm, stream)``.
"""
from __future__ import annotations

from .mpi_request import MPIRequestState


class PassthroughBarrier(MPIRequestState):
    name = "barrier/mpi_passthrough"

    def __init__(self, comm, stream):
        self.comm = comm

    @staticmethod
    def run_blocking(comm, stream):
        comm._mpi.Barrier()

    def post(self):
        return self.comm._mpi.Ibarrier()

    @classmethod
    def persistent(cls, comm, stream):
        """``MPI_Barrier_init`` for a plan's starts; its blocking runs call ``MPI_Barrier``
        itself, which has no buffers to convert and is cheaper than starting and waiting
        for the persistent form (Open MPI runs that as a nonblocking schedule)."""
        made = super().persistent(comm, stream)
        if made is not None:
            made.run = comm._mpi.Barrier
        return made
