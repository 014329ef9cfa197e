"""All-to-all by calling MPI: ``MPI_Alltoall`` when blocking, ``MPI_Ialltoall`` when not.

State arguments: ``(comm, stream, sendbuf, recvbuf)``, both ``size * n`` elements: block
``j`` of ``sendbuf`` goes to rank ``j``, block ``j`` of ``recvbuf`` comes from rank ``j``.
In place ``sendbuf is recvbuf`` and the received blocks replace the sent ones.
"""
from __future__ import annotations

from .mpi_request import MPIRequestState, pair_call, send_spec, spec


class PassthroughAlltoall(MPIRequestState):
    name = "alltoall/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf):
        comm._mpi.Alltoall(send_spec(sendbuf, recvbuf), spec(recvbuf))

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf):
        return pair_call(comm._mpi.Alltoall, sendbuf, recvbuf)

    def post(self):
        return self.comm._mpi.Ialltoall(send_spec(self.sendbuf, self.recvbuf),
                                        spec(self.recvbuf))
