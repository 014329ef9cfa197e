"""Gather with per-rank counts: ``MPI_Gatherv`` / ``MPI_Igatherv``.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs, root)``.  Rank ``r``
sends ``counts[r]`` elements, landing at element offset ``displs[r]`` of the root's
``recvbuf``.  ``recvbuf`` is None on every rank but the root; at the root ``sendbuf is
recvbuf`` means in place, the root's contribution already sitting at ``displs[root]``.
"""
from __future__ import annotations

from mpi4py import MPI

from ..datatypes import mpi_datatype
from .mpi_request import MPIRequestState, layout_spec, send_spec, spec


class PassthroughGatherv(MPIRequestState):
    name = "gatherv/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, counts, displs, root):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf
        self.counts, self.displs, self.root = counts, displs, root

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, counts, displs, root):
        comm._mpi.Gatherv(*_arguments(sendbuf, recvbuf, counts, displs), root)

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, counts, displs, root):
        call, datatype = comm._mpi.Gatherv, mpi_datatype(sendbuf.dtype)
        if recvbuf is None:
            return lambda send: call([send, datatype], None, root)
        if sendbuf is recvbuf:
            in_place = MPI.IN_PLACE
            return lambda recv: call(in_place, [recv, counts, displs, datatype], root)
        return lambda send, recv: call([send, datatype], [recv, counts, displs, datatype],
                                       root)

    def post(self):
        return self.comm._mpi.Igatherv(
            *_arguments(self.sendbuf, self.recvbuf, self.counts, self.displs), self.root)


def _arguments(sendbuf, recvbuf, counts, displs):
    if recvbuf is None:
        return spec(sendbuf), None
    return send_spec(sendbuf, recvbuf), layout_spec(recvbuf, counts, displs)
