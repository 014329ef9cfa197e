"""Scatter with per-rank counts: ``MPI_Scatterv`` / ``MPI_Iscatterv``.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs, root)``.  Rank ``r``'s
``recvbuf`` gets the ``counts[r]`` elements at element offset ``displs[r]`` of the root's
``sendbuf``.  ``sendbuf`` is None on every rank but the root; at the root ``sendbuf is
recvbuf`` means in place, the root's own block staying at ``displs[root]``.
"""
from __future__ import annotations

from mpi4py import MPI

from ..datatypes import mpi_datatype
from .mpi_request import MPIRequestState, layout_spec, spec


class PassthroughScatterv(MPIRequestState):
    name = "scatterv/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, counts, displs, root):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf
        self.counts, self.displs, self.root = counts, displs, root

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, counts, displs, root):
        comm._mpi.Scatterv(*_arguments(sendbuf, recvbuf, counts, displs), root)

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, counts, displs, root):
        call, datatype = comm._mpi.Scatterv, mpi_datatype(recvbuf.dtype)
        if sendbuf is None:
            return lambda recv: call(None, [recv, datatype], root)
        if sendbuf is recvbuf:
            in_place = MPI.IN_PLACE
            return lambda buf: call([buf, counts, displs, datatype], in_place, root)
        return lambda send, recv: call([send, counts, displs, datatype], [recv, datatype],
                                       root)

    def post(self):
        return self.comm._mpi.Iscatterv(
            *_arguments(self.sendbuf, self.recvbuf, self.counts, self.displs), self.root)


def _arguments(sendbuf, recvbuf, counts, displs):
    if sendbuf is None:
        return None, spec(recvbuf)
    recv = MPI.IN_PLACE if sendbuf is recvbuf else spec(recvbuf)
    return layout_spec(sendbuf, counts, displs), recv
