"""All-to-all by calling MPI: ``MPI_Alltoall`` when blocking, ``MPI_Ialltoall`` when not.

State arguments: ``(comm, stream, sendbuf, recvbuf)``, both ``size * n`` elements: block
``j`` of ``sendbuf`` goes to rank ``j``, block ``j`` of ``recvbuf`` comes from rank ``j``.
In place ``sendbuf is recvbuf`` and the received blocks replace the sent ones.
"""
from __future__ import annotations

from .mpi_call import MPICall, MPICalls, send_spec, spec


class PassthroughAlltoall(MPICall):
    name = "alltoall/mpi_passthrough"
    calls = MPICalls("Alltoall", "Ialltoall", "Alltoall_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf):
        return send_spec(sendbuf, recvbuf), spec(recvbuf)
