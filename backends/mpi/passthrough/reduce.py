"""Reduce by calling MPI: ``MPI_Reduce`` when blocking, ``MPI_Ireduce`` polled when not.

State arguments: ``(comm, stream, sendbuf, recvbuf, op, root)``.  ``recvbuf`` is None on
every rank but the root; at the root ``sendbuf is recvbuf`` means in place.
"""
from __future__ import annotations

from ..datatypes import mpi_op
from .mpi_request import MPIRequestState, send_spec, spec


class PassthroughReduce(MPIRequestState):
    name = "reduce/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, op, root):
        self.comm, self.sendbuf, self.recvbuf = comm, sendbuf, recvbuf
        self.op, self.root = op, root

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, op, root):
        comm._mpi.Reduce(*_arguments(sendbuf, recvbuf, op), root)
        _finish(comm, recvbuf, op)

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
