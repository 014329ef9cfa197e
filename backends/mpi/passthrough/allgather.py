"""Allgather by calling MPI: ``MPI_Allgather`` when blocking, ``MPI_Iallgather`` when not.

State arguments: ``(comm, stream, sendbuf, recvbuf)``.  ``sendbuf`` holds ``n`` elements,
``recvbuf`` ``size * n``; in place ``sendbuf is recvbuf`` and this rank's contribution
already sits at offset ``rank * n``.
"""
from __future__ import annotations

from .mpi_request import MPIRequestState, pair_call, send_spec, spec


class PassthroughAllgather(MPIRequestState):
    name = "allgather/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf):
        comm._mpi.Allgather(send_spec(sendbuf, recvbuf), spec(recvbuf))

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf):
        return pair_call(comm._mpi.Allgather, sendbuf, recvbuf)

    def post(self):
        return self.comm._mpi.Iallgather(send_spec(self.sendbuf, self.recvbuf),
                                         spec(self.recvbuf))
