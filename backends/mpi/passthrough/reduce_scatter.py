"""Reduce-scatter by calling MPI: ``MPI_Reduce_scatter_block`` / ``MPI_Ireduce_scatter_block``.

State arguments: ``(comm, stream, sendbuf, recvbuf, op)``.  ``sendbuf`` holds ``size * n``
elements, ``recvbuf`` ``n``; in place ``sendbuf is recvbuf`` holds ``size * n`` and this
rank's reduced block lands in its first ``n`` elements (MPI's in-place semantics).
"""
from __future__ import annotations

from ..datatypes import mpi_op
from .mpi_call import MPICall, MPICalls, send_spec, spec


class PassthroughReduceScatter(MPICall):
    name = "reduce_scatter/mpi_passthrough"
    calls = MPICalls("Reduce_scatter_block", "Ireduce_scatter_block",
                     "Reduce_scatter_block_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, op):
        return send_spec(sendbuf, recvbuf), spec(recvbuf), mpi_op(op, recvbuf.dtype)

    @staticmethod
    def finishing(comm, stream, sendbuf, recvbuf, op):
        return op, recvbuf, recvbuf.count // comm.size if sendbuf is recvbuf else None

    @staticmethod
    def order_sensitive(comm, stream, sendbuf, recvbuf, op):
        return comm.size > 2 and op.order_sensitive(recvbuf.dtype)
