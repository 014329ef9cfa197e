"""Reduce-scatter with per-rank counts: ``MPI_Reduce_scatter`` / ``MPI_Ireduce_scatter``.

State arguments: ``(comm, stream, sendbuf, recvbuf, op, counts)``.  ``sendbuf`` holds
``sum(counts)`` elements, rank ``r``'s block being the ``counts[r]`` elements after the
blocks of lower ranks; ``recvbuf`` holds ``counts[rank]``.  In place ``sendbuf is recvbuf``
holds ``sum(counts)`` and this rank's reduced block lands in its first ``counts[rank]``.
"""
from __future__ import annotations

from ..datatypes import mpi_op
from .mpi_call import MPICall, MPICalls, send_spec, spec


class PassthroughReduceScatterv(MPICall):
    name = "reduce_scatterv/mpi_passthrough"
    calls = MPICalls("Reduce_scatter", "Ireduce_scatter", "Reduce_scatter_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, op, counts):
        return send_spec(sendbuf, recvbuf), spec(recvbuf), counts, mpi_op(op, recvbuf.dtype)

    @staticmethod
    def finishing(comm, stream, sendbuf, recvbuf, op, counts):
        return op, recvbuf, counts[comm.rank]

    @staticmethod
    def order_sensitive(comm, stream, sendbuf, recvbuf, op, counts):
        return comm.size > 2 and op.order_sensitive(recvbuf.dtype)
