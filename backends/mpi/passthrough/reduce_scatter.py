"""Reduce-scatter by calling MPI: ``MPI_Reduce_scatter_block`` / ``MPI_Ireduce_scatter_block``.

State arguments: ``(comm, stream, sendbuf, recvbuf, op)``.  ``sendbuf`` holds ``size * n``
elements, ``recvbuf`` ``n``; in place ``sendbuf is recvbuf`` holds ``size * n`` and this
rank's reduced block lands in its first ``n`` elements (MPI's in-place semantics).
"""
from __future__ import annotations

from ..datatypes import mpi_op
from .mpi_request import MPIRequestState, pair_call, send_spec, spec, then_finish


class PassthroughReduceScatter(MPIRequestState):
    name = "reduce_scatter/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        self.comm, self.sendbuf, self.recvbuf, self.op = comm, sendbuf, recvbuf, op

    @classmethod
    def run_blocking(cls, comm, stream, sendbuf, recvbuf, op):
        if cls.ordered_run_blocking(comm, stream, sendbuf, recvbuf, op):
            return
        comm._mpi.Reduce_scatter_block(send_spec(sendbuf, recvbuf), spec(recvbuf),
                                       mpi_op(op, recvbuf.dtype))
        _finish(comm, sendbuf, recvbuf, op)

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, op):
        """``MPI_Reduce_scatter_block`` on new arrays; None where the order matters."""
        if comm.size > 2 and op.order_sensitive(recvbuf.dtype):
            return None
        call = pair_call(comm._mpi.Reduce_scatter_block, sendbuf, recvbuf,
                         mpi_op(op, recvbuf.dtype))
        if not op.finishes(comm.size):
            return call
        return then_finish(call, sendbuf is recvbuf, op, comm.size, sendbuf.count // comm.size)

    def order_sensitive(self):
        return self.comm.size > 2 and self.op.order_sensitive(self.recvbuf.dtype)

    def post(self):
        return self.comm._mpi.Ireduce_scatter_block(
            send_spec(self.sendbuf, self.recvbuf), spec(self.recvbuf),
            mpi_op(self.op, self.recvbuf.dtype))

    def finish(self):
        _finish(self.comm, self.sendbuf, self.recvbuf, self.op)


def _finish(comm, sendbuf, recvbuf, op):
    count = recvbuf.count // comm.size if sendbuf is recvbuf else recvbuf.count
    op.finish(recvbuf.array[:count], comm.size)
