"""All-to-all with per-rank layouts: ``MPI_Alltoallv`` / ``MPI_Ialltoallv``.

State arguments: ``(comm, stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts,
recv_displs)``.  ``send_counts[j]`` elements at ``send_displs[j]`` of ``sendbuf`` go to rank
``j``; ``recv_counts[j]`` elements from rank ``j`` land at ``recv_displs[j]`` of ``recvbuf``.
In place ``sendbuf is recvbuf`` and the send layout is the receive layout (MPI ignores it).
"""
from __future__ import annotations

from mpi4py import MPI

from .mpi_call import MPICall, MPICalls, layout_spec


class PassthroughAlltoallv(MPICall):
    name = "alltoallv/mpi_passthrough"
    calls = MPICalls("Alltoallv", "Ialltoallv", "Alltoallv_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts,
                  recv_displs):
        recv = layout_spec(recvbuf, recv_counts, recv_displs)
        if sendbuf is recvbuf:
            return MPI.IN_PLACE, recv
        return layout_spec(sendbuf, send_counts, send_displs), recv
