"""Allreduce by calling MPI: ``MPI_Allreduce`` when blocking, ``MPI_Iallreduce`` polled when not."""
from __future__ import annotations

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
        self._bind(comm, op, mpi_plan(op, recvbuf.dtype), sendbuf.array,
                   None if sendbuf is recvbuf else recvbuf.array)

    def _bind(self, comm, op, decided, buf, recvbuf) -> None:
        """Set the fields from arrays: in place when ``recvbuf`` is None or ``buf``."""
        self.comm, self.op, self.decided = comm, op, decided
        if recvbuf is None or recvbuf is buf:
            self.send, self.recv = None, buf
        else:
            self.send, self.recv = buf, recvbuf

    @classmethod
    def array_state(cls, op, dtype):
        """``make(comm, buf, recvbuf)``: an unstarted state on C-contiguous numpy arrays (in
        place when ``recvbuf`` is None or ``buf``), MPI datatype and op decided once; what
        repeat nonblocking calls build (aluminum/allreduce.py) instead of Buffers."""
        decided = mpi_plan(op, dtype)
        new = cls.__new__

        def make(comm, buf, recvbuf):
            state = new(cls)
            state._bind(comm, op, decided, buf, recvbuf)
            return state
        return make

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
