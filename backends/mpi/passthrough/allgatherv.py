"""Allgather with per-rank counts: ``MPI_Allgatherv`` / ``MPI_Iallgatherv``.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs)``.  Rank ``r``'s
``counts[r]`` elements land at element offset ``displs[r]`` of ``recvbuf``; in place
``sendbuf is recvbuf`` and this rank's contribution already sits at ``displs[rank]``.
"""
from __future__ import annotations

from mpi4py import MPI

from ..datatypes import mpi_datatype
from .mpi_request import MPIRequestState, layout_spec, send_spec


class PassthroughAllgatherv(MPIRequestState):
    name = "allgatherv/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, counts, displs):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf
        self.counts, self.displs = counts, displs

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, counts, displs):
        comm._mpi.Allgatherv(send_spec(sendbuf, recvbuf), layout_spec(recvbuf, counts, displs))

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, counts, displs):
        call, datatype = comm._mpi.Allgatherv, mpi_datatype(recvbuf.dtype)
        if sendbuf is recvbuf:
            in_place = MPI.IN_PLACE
            return lambda recv: call(in_place, [recv, counts, displs, datatype])
        return lambda send, recv: call([send, datatype], [recv, counts, displs, datatype])

    def post(self):
        return self.comm._mpi.Iallgatherv(send_spec(self.sendbuf, self.recvbuf),
                                          layout_spec(self.recvbuf, self.counts, self.displs))
