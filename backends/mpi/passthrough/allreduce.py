"""Allreduce by calling MPI: ``MPI_Allreduce`` when blocking, ``MPI_Iallreduce`` polled when not."""
from __future__ import annotations

import functools

from mpi4py import MPI

from ....engine.state import Action, State
from ..datatypes import mpi_plan
from .persistent import PersistentRequest

_CONTINUE, _COMPLETE = Action.CONTINUE, Action.COMPLETE


class PassthroughAllreduce(State):
    """``send``/``recv``: the numpy arrays (``send`` None in place); ``decided``: ``mpi_plan``
    of the op and dtype."""

    name = "allreduce/mpi_passthrough"
    request = None

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        self.comm, self.op = comm, op
        self.decided = mpi_plan(op, recvbuf.dtype)
        self.send = None if sendbuf is recvbuf else sendbuf.array
        self.recv = recvbuf.array

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, op):
        PassthroughAllreduce.blocking_call(comm, stream, sendbuf, recvbuf, op)()

    @staticmethod
    def blocking_call(comm, stream, sendbuf, recvbuf, op):
        """``MPI_Allreduce`` with its datatype, op and buffer specs made once."""
        datatype, mpiop, needs_finish = mpi_plan(op, recvbuf.dtype)
        recv = recvbuf.array
        send = MPI.IN_PLACE if sendbuf is recvbuf else [sendbuf.array, datatype]
        call = functools.partial(comm.mpi_comm.Allreduce, send, [recv, datatype], mpiop)
        if not needs_finish:
            return call
        flat, size = recv.reshape(-1), comm.size

        def call_and_finish():
            call()
            op.finish(flat, size)
        return call_and_finish

    @classmethod
    def persistent(cls, comm, stream, sendbuf, recvbuf, op) -> PersistentRequest | None:
        """``MPI_Allreduce_init`` on the plan's buffers; None where MPI lacks it."""
        datatype, mpiop, needs_finish = mpi_plan(op, recvbuf.dtype)
        send = MPI.IN_PLACE if sendbuf is recvbuf else [sendbuf.array, datatype]
        recv = recvbuf.array
        try:
            request = comm.mpi_comm.Allreduce_init(send, [recv, datatype], mpiop)
        except (NotImplementedError, MPI.Exception):
            return None
        finish = None
        if needs_finish:
            flat, size = recv.reshape(-1), comm.size

            def finish():
                op.finish(flat, size)
        return PersistentRequest(comm, cls.name, request, finish)

    def start(self):
        datatype, mpiop, _ = self.decided
        send = MPI.IN_PLACE if self.send is None else [self.send, datatype]
        self.request = self.comm._mpi.Iallreduce(send, [self.recv, datatype], mpiop)

    def step(self):
        if not self.request.Test():
            return _CONTINUE
        if self.decided[2]:
            self.op.finish(self.recv.reshape(-1), self.comm.size)
        return _COMPLETE
