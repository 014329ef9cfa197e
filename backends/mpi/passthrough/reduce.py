"""Reduce by calling MPI: ``MPI_Reduce`` when blocking, ``MPI_Ireduce`` polled when not
(``MPI_Ireduce`` waited for where the order of the operands matters, ``order_sensitive``).

State arguments: ``(comm, stream, sendbuf, recvbuf, op, root)``.  ``recvbuf`` is None on
every rank but the root; at the root ``sendbuf is recvbuf`` means in place.
"""
from __future__ import annotations

from ..datatypes import mpi_datatype, mpi_op
from .mpi_request import MPIRequestState, pair_call, send_spec, spec, then_finish


class PassthroughReduce(MPIRequestState):
    name = "reduce/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, op, root):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf
        self.op, self.root = op, root

    @classmethod
    def run_blocking(cls, comm, stream, sendbuf, recvbuf, op, root):
        if cls.ordered_run_blocking(comm, stream, sendbuf, recvbuf, op, root):
            return
        comm._mpi.Reduce(*_arguments(sendbuf, recvbuf, op), root)
        _finish(comm, recvbuf, op)

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, op, root):
        """``MPI_Reduce`` on new arrays; None where the order matters."""
        if comm.size > 2 and op.order_sensitive(sendbuf.dtype):
            return None
        call, mpiop = comm._mpi.Reduce, mpi_op(op, sendbuf.dtype)
        if recvbuf is None:
            datatype = mpi_datatype(sendbuf.dtype)
            return lambda send: call([send, datatype], None, mpiop, root)
        reduce = pair_call(call, sendbuf, recvbuf, mpiop, root)
        if not op.finishes(comm.size):
            return reduce
        return then_finish(reduce, sendbuf is recvbuf, op, comm.size)

    def order_sensitive(self):
        return self.comm.size > 2 and self.op.order_sensitive(self.sendbuf.dtype)

    def post(self):
        return self.comm._mpi.Ireduce(*_arguments(self.sendbuf, self.recvbuf, self.op),
                                      self.root)

    def finish(self):
        _finish(self.comm, self.recvbuf, self.op)


def _arguments(sendbuf, recvbuf, op):
    mpi_reduction = mpi_op(op, sendbuf.dtype)
    if recvbuf is None:
        return spec(sendbuf), None, mpi_reduction
    return send_spec(sendbuf, recvbuf), spec(recvbuf), mpi_reduction


def _finish(comm, recvbuf, op):
    if recvbuf is not None:
        op.finish(recvbuf.array, comm.size)
