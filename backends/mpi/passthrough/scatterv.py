"""Scatter with per-rank counts: ``MPI_Scatterv`` / ``MPI_Iscatterv``.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs, root)``.  Rank ``r``'s
``recvbuf`` gets the ``counts[r]`` elements at element offset ``displs[r]`` of the root's
``sendbuf``.  ``sendbuf`` is None on every rank but the root; at the root ``sendbuf is
recvbuf`` means in place, the root's own block staying at ``displs[root]``.
"""
from __future__ import annotations

from mpi4py import MPI

from .mpi_call import MPICall, MPICalls, layout_spec, spec


class PassthroughScatterv(MPICall):
    name = "scatterv/mpi_passthrough"
    calls = MPICalls("Scatterv", "Iscatterv", "Scatterv_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, counts, displs, root):
        if sendbuf is None:
            return None, spec(recvbuf), root
        recv = MPI.IN_PLACE if sendbuf is recvbuf else spec(recvbuf)
        return layout_spec(sendbuf, counts, displs), recv, root
