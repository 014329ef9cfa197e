"""Barrier by calling MPI: ``MPI_Barrier`` when blocking, ``MPI_Ibarrier`` when not.

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

    @staticmethod
    def array_call(comm, stream):
        return comm._mpi.Barrier

    def post(self):
        return self.comm._mpi.Ibarrier()
