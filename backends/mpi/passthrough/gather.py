"""Gather by calling MPI: ``MPI_Gather`` when blocking, ``MPI_Igather`` when not.

State arguments: ``(comm, stream, sendbuf, recvbuf, root)``.  Every rank sends ``n``
elements; the root's ``recvbuf`` (``size * n``) gets rank ``r``'s at offset ``r * n``.
``recvbuf`` is None on every rank but the root; at the root ``sendbuf is recvbuf`` means in
place, the root's own contribution already sitting at offset ``root * n``.
"""
from __future__ import annotations

from .mpi_call import MPICall, MPICalls, send_spec, spec


class PassthroughGather(MPICall):
    name = "gather/mpi_passthrough"
    calls = MPICalls("Gather", "Igather", "Gather_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, root):
        if recvbuf is None:
            return spec(sendbuf), None, root
        return send_spec(sendbuf, recvbuf), spec(recvbuf), root
