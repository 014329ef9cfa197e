"""Barrier by calling MPI: ``MPI_Barrier`` when blocking, ``MPI_Ibarrier`` when not.

State arguments: ``(comm, stream)``.
"""
from __future__ import annotations

from .mpi_call import MPICall, MPICalls


class PassthroughBarrier(MPICall):
    name = "barrier/mpi_passthrough"
    calls = MPICalls("Barrier", "Ibarrier", "Barrier_init")

    @staticmethod
    def arguments(comm, stream):
        return ()
