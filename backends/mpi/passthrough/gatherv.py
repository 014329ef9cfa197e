"""Gather with per-rank counts: ``MPI_Gatherv`` / ``MPI_Igatherv``.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs, root)``.  Rank ``r``
sends ``counts[r]`` elements, landing at element offset ``displs[r]`` of the root's
``recvbuf``.  ``recvbuf`` is None on every rank but the root; at the root ``sendbuf is
recvbuf`` means in place, the root's contribution already sitting at ``displs[root]``.
"""
from __future__ import annotations

from .mpi_call import MPICall, MPICalls, layout_spec, send_spec, spec


class PassthroughGatherv(MPICall):
    name = "gatherv/mpi_passthrough"
    calls = MPICalls("Gatherv", "Igatherv", "Gatherv_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, counts, displs, root):
        if recvbuf is None:
            return spec(sendbuf), None, root
        return send_spec(sendbuf, recvbuf), layout_spec(recvbuf, counts, displs), root
