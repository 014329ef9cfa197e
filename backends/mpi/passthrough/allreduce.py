"""Allreduce by calling MPI: ``MPI_Allreduce`` when blocking, ``MPI_Iallreduce`` polled when not."""
from __future__ import annotations

from mpi4py import MPI

from ....engine.state import Action, State
from ..datatypes import mpi_plan

_CONTINUE, _COMPLETE = Action.CONTINUE, Action.COMPLETE


class PassthroughAllreduce(State):
    name = "allreduce/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        self.comm, self.sendbuf, self.recvbuf, self.op = comm, sendbuf, recvbuf, op
        self.request = None

    @staticmethod
    def array_runner(op, dtype):
        """``run(comm, buf, recvbuf)``: the blocking allreduce of C-contiguous numpy arrays (in
        place when ``recvbuf`` is None or ``buf``), MPI datatype and op decided once; what
        ``run_blocking`` runs, and what repeat calls keep (aluminum/allreduce.py)."""
        datatype, mpiop, needs_finish = mpi_plan(op, dtype)
        in_place = MPI.IN_PLACE

        def run(comm, buf, recvbuf):
            if recvbuf is None or recvbuf is buf:
                comm._mpi.Allreduce(in_place, [buf, datatype], mpiop)
                recvbuf = buf
            else:
                comm._mpi.Allreduce([buf, datatype], [recvbuf, datatype], mpiop)
            if needs_finish:
                op.finish(recvbuf.reshape(-1), comm.size)
        return run

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, op):
        PassthroughAllreduce.array_runner(op, recvbuf.dtype)(comm, sendbuf.array,
                                                              recvbuf.array)

    def start(self):
        datatype, mpiop, self.needs_finish = mpi_plan(self.op, self.recvbuf.dtype)
        send = MPI.IN_PLACE if self.sendbuf is self.recvbuf else [self.sendbuf.array, datatype]
        self.request = self.comm._mpi.Iallreduce(send, [self.recvbuf.array, datatype], mpiop)

    def step(self):
        if not self.request.Test():
            return _CONTINUE
        if self.needs_finish:
            self.op.finish(self.recvbuf.array, self.comm.size)
        return _COMPLETE
