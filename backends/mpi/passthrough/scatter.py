"""Scatter by calling MPI: ``MPI_Scatter`` when blocking, ``MPI_Iscatter`` when not.

State arguments: ``(comm, stream, sendbuf, recvbuf, root)``.  The root's ``sendbuf`` holds
``size * n`` elements; rank ``r``'s ``recvbuf`` (``n``) gets the block at offset ``r * n``.
``sendbuf`` is None on every rank but the root; at the root ``sendbuf is recvbuf`` means in
place, the root's own block staying where it is.
"""
from __future__ import annotations

from mpi4py import MPI

from ..datatypes import mpi_datatype
from .mpi_request import MPIRequestState, spec


class PassthroughScatter(MPIRequestState):
    name = "scatter/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, root):
        self.comm, self.sendbuf, self.recvbuf, self.root = comm, sendbuf, recvbuf, root

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, root):
        comm._mpi.Scatter(*_arguments(sendbuf, recvbuf), root)

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, root):
        call, datatype = comm._mpi.Scatter, mpi_datatype(recvbuf.dtype)
        if sendbuf is None:
            return lambda recv: call(None, [recv, datatype], root)
        if sendbuf is recvbuf:
            in_place = MPI.IN_PLACE
            return lambda buf: call([buf, datatype], in_place, root)
        return lambda send, recv: call([send, datatype], [recv, datatype], root)

    def post(self):
        return self.comm._mpi.Iscatter(*_arguments(self.sendbuf, self.recvbuf), self.root)


def _arguments(sendbuf, recvbuf):
    if sendbuf is None:
        return None, spec(recvbuf)
    return spec(sendbuf), MPI.IN_PLACE if sendbuf is recvbuf else spec(recvbuf)
