"""All-to-all with per-rank layouts: ``MPI_Alltoallv`` / ``MPI_Ialltoallv``.

State arguments: ``(comm, stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts,
recv_displs)``.  ``send_counts[j]`` elements at ``send_displs[j]`` of ``sendbuf`` go to rank
``j``; ``recv_counts[j]`` elements from rank ``j`` land at ``recv_displs[j]`` of ``recvbuf``.
In place ``sendbuf is recvbuf`` and the send layout is the receive layout (MPI ignores it).
"""
from __future__ import annotations

from mpi4py import MPI

from ..datatypes import mpi_datatype
from .mpi_request import MPIRequestState, layout_spec


class PassthroughAlltoallv(MPIRequestState):
    name = "alltoallv/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts,
                 recv_displs):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf
        self.layouts = (send_counts, send_displs, recv_counts, recv_displs)

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts,
                     recv_displs):
        comm._mpi.Alltoallv(*_arguments(sendbuf, recvbuf, send_counts, send_displs,
                                        recv_counts, recv_displs))

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts,
                   recv_displs):
        call, datatype = comm._mpi.Alltoallv, mpi_datatype(recvbuf.dtype)
        if sendbuf is recvbuf:
            in_place = MPI.IN_PLACE
            return lambda recv: call(in_place, [recv, recv_counts, recv_displs, datatype])
        return lambda send, recv: call([send, send_counts, send_displs, datatype],
                                       [recv, recv_counts, recv_displs, datatype])

    def post(self):
        return self.comm._mpi.Ialltoallv(*_arguments(self.sendbuf, self.recvbuf, *self.layouts))


def _arguments(sendbuf, recvbuf, send_counts, send_displs, recv_counts, recv_displs):
    recv = layout_spec(recvbuf, recv_counts, recv_displs)
    if sendbuf is recvbuf:
        return MPI.IN_PLACE, recv
    return layout_spec(sendbuf, send_counts, send_displs), recv
