"""Allgather by calling MPI: ``MPI_Allgather`` when blocking, ``MPI_Iallgather`` when not.

State arguments: ``(comm, stream, sendbuf, recvbuf)``.  ``sendbuf`` holds ``n`` elements,
``recvbuf`` ``size * n``; in place ``sendbuf is recvbuf`` and this rank's contribution
already sits at offset ``rank * n``.
"""
from __future__ import annotations

from .mpi_call import MPICall, MPICalls, send_spec, spec


class PassthroughAllgather(MPICall):
    name = "allgather/mpi_passthrough"
    calls = MPICalls("Allgather", "Iallgather", "Allgather_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf):
        return send_spec(sendbuf, recvbuf), spec(recvbuf)
