"""Allgather with per-rank counts: ``MPI_Allgatherv`` / ``MPI_Iallgatherv``.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs)``.  Rank ``r``'s
``counts[r]`` elements land at element offset ``displs[r]`` of ``recvbuf``; in place
``sendbuf is recvbuf`` and this rank's contribution already sits at ``displs[rank]``.
"""
from __future__ import annotations

from .mpi_call import MPICall, MPICalls, layout_spec, send_spec


class PassthroughAllgatherv(MPICall):
    name = "allgatherv/mpi_passthrough"
    calls = MPICalls("Allgatherv", "Iallgatherv", "Allgatherv_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, counts, displs):
        return send_spec(sendbuf, recvbuf), layout_spec(recvbuf, counts, displs)
