"""Scatter by calling MPI: ``MPI_Scatter`` when blocking, ``MPI_Iscatter`` when not.

State arguments: ``(comm, stream, sendbuf, recvbuf, root)``.  The root's ``sendbuf`` holds
``size * n`` elements; rank ``r``'s ``recvbuf`` (``n``) gets the block at offset ``r * n``.
``sendbuf`` is None on every rank but the root; at the root ``sendbuf is recvbuf`` means in
place, the root's own block staying where it is.
"""
from __future__ import annotations

from mpi4py import MPI

from .mpi_call import MPICall, MPICalls, spec


class PassthroughScatter(MPICall):
    name = "scatter/mpi_passthrough"
    calls = MPICalls("Scatter", "Iscatter", "Scatter_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, root):
        if sendbuf is None:
            return None, spec(recvbuf), root
        return spec(sendbuf), MPI.IN_PLACE if sendbuf is recvbuf else spec(recvbuf), root
