"""Reduce by calling MPI: ``MPI_Reduce`` when blocking, ``MPI_Ireduce`` polled when not
(``MPI_Ireduce`` waited for where the order of the operands matters, ``order_sensitive``).

State arguments: ``(comm, stream, sendbuf, recvbuf, op, root)``.  ``recvbuf`` is None on
every rank but the root; at the root ``sendbuf is recvbuf`` means in place.
"""
from __future__ import annotations

from ..datatypes import mpi_op
from .mpi_call import MPICall, MPICalls, send_spec, spec


class PassthroughReduce(MPICall):
    name = "reduce/mpi_passthrough"
    calls = MPICalls("Reduce", "Ireduce", "Reduce_init")

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, op, root):
        mpi_reduction = mpi_op(op, sendbuf.dtype)
        if recvbuf is None:
            return spec(sendbuf), None, mpi_reduction, root
        return send_spec(sendbuf, recvbuf), spec(recvbuf), mpi_reduction, root

    @staticmethod
    def finishing(comm, stream, sendbuf, recvbuf, op, root):
        return None if recvbuf is None else (op, recvbuf, None)

    @staticmethod
    def order_sensitive(comm, stream, sendbuf, recvbuf, op, root):
        return comm.size > 2 and op.order_sensitive(sendbuf.dtype)
