"""Allreduce by calling MPI: ``MPI_Allreduce`` when blocking, ``MPI_Iallreduce`` polled when not."""
from __future__ import annotations

from mpi4py import MPI

from ....engine.state import Action, State
from ..datatypes import mpi_datatype, mpi_op, mpi_plan


class PassthroughAllreduce(State):
    name = "allreduce/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        self.comm, self.sendbuf, self.recvbuf, self.op = comm, sendbuf, recvbuf, op
        self.request = None

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, op):
        datatype, mpiop, needs_finish = mpi_plan(op, recvbuf.dtype)
        send = MPI.IN_PLACE if sendbuf is recvbuf else [sendbuf.array, datatype]
        comm._mpi.Allreduce(send, [recvbuf.array, datatype], mpiop)
        if needs_finish:
            op.finish(recvbuf.array, comm.size)

    def start(self):
        dtype = self.recvbuf.dtype
        datatype = mpi_datatype(dtype)
        send = MPI.IN_PLACE if self.sendbuf is self.recvbuf else [self.sendbuf.array, datatype]
        self.request = self.comm.mpi_comm.Iallreduce(
            send, [self.recvbuf.array, datatype], mpi_op(self.op, dtype))

    def step(self):
        if not self.request.Test():
            return Action.CONTINUE
        self.op.finish(self.recvbuf.array, self.comm.size)
        return Action.COMPLETE
