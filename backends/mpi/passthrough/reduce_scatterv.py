"""Reduce-scatter with per-rank counts: ``MPI_Reduce_scatter`` / ``MPI_Ireduce_scatter``.

State arguments: ``(comm, stream, sendbuf, recvbuf, op, counts)``.  ``sendbuf`` holds
``sum(counts)`` elements, rank ``r``'s block being the ``counts[r]`` elements after the
blocks of lower ranks; ``recvbuf`` holds ``counts[rank]``.  In place ``sendbuf is recvbuf``
holds ``sum(counts)`` and this rank's reduced block lands in its first ``counts[rank]``.
"""
from __future__ import annotations

from ..datatypes import mpi_op
from .mpi_request import MPIRequestState, pair_call, send_spec, spec, then_finish


class PassthroughReduceScatterv(MPIRequestState):
    name = "reduce_scatterv/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, op, counts):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf
        self.op, self.counts = op, counts

    @classmethod
    def run_blocking(cls, comm, stream, sendbuf, recvbuf, op, counts):
        if cls.ordered_run_blocking(comm, stream, sendbuf, recvbuf, op, counts):
            return
        comm._mpi.Reduce_scatter(send_spec(sendbuf, recvbuf), spec(recvbuf), counts,
                                 mpi_op(op, recvbuf.dtype))
        op.finish(recvbuf.array[:counts[comm.rank]], comm.size)

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, op, counts):
        """``MPI_Reduce_scatter`` on new arrays; None where the order matters."""
        if comm.size > 2 and op.order_sensitive(recvbuf.dtype):
            return None
        call = pair_call(comm._mpi.Reduce_scatter, sendbuf, recvbuf, counts,
                         mpi_op(op, recvbuf.dtype))
        if not op.finishes(comm.size):
            return call
        return then_finish(call, sendbuf is recvbuf, op, comm.size, counts[comm.rank])

    def order_sensitive(self):
        return self.comm.size > 2 and self.op.order_sensitive(self.recvbuf.dtype)

    def post(self):
        return self.comm._mpi.Ireduce_scatter(
            send_spec(self.sendbuf, self.recvbuf), spec(self.recvbuf), self.counts,
            mpi_op(self.op, self.recvbuf.dtype))

    def finish(self):
        self.op.finish(self.recvbuf.array[:self.counts[self.comm.rank]], self.comm.size)
