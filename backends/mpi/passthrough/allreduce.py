"""Allreduce by calling MPI: ``MPI_Allreduce`` when blocking, ``MPI_Iallreduce`` polled when not.

One answer per call: where the order of the operands changes the bits (floating-point SUM,
PROD and AVG on three ranks or more), the blocking form is ``MPI_Iallreduce`` waited for,
not ``MPI_Allreduce``.  Open MPI reduces in different orders in the two (on 3 ranks here they
differed from 40 KiB to somewhat below 600 KiB of float16), and a blocking call goes through
the nonblocking form anyway when ``AL_TIMEOUT`` is set; plans then take no MPI persistent
request either, whose order MPI does not promise to be the same.  In deterministic mode those
reductions gather every rank's vector (``MPI_Allgather``/``MPI_Iallgather``) and reduce it in
rank order, so they give the custom algorithms' bits.
"""
from __future__ import annotations

import functools

import numpy as np
from mpi4py import MPI

from ....core.reduction import reduce_in_rank_order, sums_in_rank_order
from ....engine.state import Action, State
from ..datatypes import mpi_plan
from .mpi_request import pair_call, then_finish
from .persistent import PersistentRequest

_CONTINUE, _COMPLETE = Action.CONTINUE, Action.COMPLETE


def _order_sensitive(comm, op, dtype) -> bool:
    """Whether MPI's blocking and nonblocking allreduces may give different bits."""
    return comm.size > 2 and op.order_sensitive(dtype)


class PassthroughAllreduce(State):
    """``send``/``recv``: the numpy arrays (``send`` None in place); ``decided``: ``mpi_plan``
    of the op and dtype; ``rank_order``: deterministic mode applies (gather, then reduce)."""

    name = "allreduce/mpi_passthrough"
    request = None
    gathered = None

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        self.comm, self.op = comm, op
        self.decided = mpi_plan(op, recvbuf.dtype)
        self.send = None if sendbuf is recvbuf else sendbuf.array
        self.recv = recvbuf.array
        self.rank_order = sums_in_rank_order(op, recvbuf.dtype, comm.size)

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, op):
        """``blocking_call``'s call made and called at once (what a call on new buffers
        runs: nothing is kept, so nothing is bound)."""
        recv = recvbuf.array
        if _order_sensitive(comm, op, recv.dtype):
            _ordered_blocking(comm, sendbuf, recvbuf, op)
            return
        datatype, mpiop, needs_finish = mpi_plan(op, recv.dtype)
        comm._mpi.Allreduce(MPI.IN_PLACE if sendbuf is recvbuf else [sendbuf.array, datatype],
                            [recv, datatype], mpiop)
        if needs_finish:
            op.finish(recv.reshape(-1), comm.size)

    @staticmethod
    def blocking_call(comm, stream, sendbuf, recvbuf, op):
        """``MPI_Allreduce`` with its datatype, op and buffer specs made once (where the
        order matters: the nonblocking form's call, or deterministic mode's)."""
        if _order_sensitive(comm, op, recvbuf.dtype):
            return functools.partial(_ordered_blocking, comm, sendbuf, recvbuf, op)
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

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, op):
        """``MPI_Allreduce`` on new arrays; None where the order matters (its path reads
        the deterministic mode on every call)."""
        if _order_sensitive(comm, op, recvbuf.dtype):
            return None
        datatype, mpiop, needs_finish = mpi_plan(op, recvbuf.dtype)
        call = pair_call(comm._mpi.Allreduce, sendbuf, recvbuf, mpiop)
        if not needs_finish:
            return call
        return then_finish(call, sendbuf is recvbuf, op, comm.size)

    @classmethod
    def persistent(cls, comm, stream, sendbuf, recvbuf, op) -> PersistentRequest | None:
        """``MPI_Allreduce_init`` on the plan's buffers; None where MPI lacks it, or where
        its order of reduction could differ from ``MPI_Iallreduce``'s."""
        if _order_sensitive(comm, op, recvbuf.dtype):
            return None
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
        if self.rank_order:
            source = self.recv if self.send is None else self.send
            self.gathered = np.empty((self.comm.size, source.size), source.dtype)
            self.request = self.comm._mpi.Iallgather(_raw(source), _raw(self.gathered))
            return
        datatype, mpiop, _ = self.decided
        send = MPI.IN_PLACE if self.send is None else [self.send, datatype]
        self.request = self.comm._mpi.Iallreduce(send, [self.recv, datatype], mpiop)

    def step(self):
        if not self.request.Test():
            return _CONTINUE
        if self.gathered is not None:
            _reduce_gathered(self.op, self.gathered, self.recv.reshape(-1), self.comm.size)
        elif self.decided[2]:
            self.op.finish(self.recv.reshape(-1), self.comm.size)
        return _COMPLETE


def _ordered_blocking(comm, sendbuf, recvbuf, op) -> None:
    """The blocking allreduce of an order-sensitive reduction: in rank order in
    deterministic mode (read per call), else in ``MPI_Iallreduce``'s order."""
    recv = recvbuf.array
    source = recv if sendbuf is recvbuf else sendbuf.array
    mpi = comm.mpi_comm
    if sums_in_rank_order(op, recv.dtype, comm.size):
        gathered = np.empty((comm.size, source.size), source.dtype)
        mpi.Allgather(_raw(source), _raw(gathered))
        _reduce_gathered(op, gathered, recv.reshape(-1), comm.size)
        return
    datatype, mpiop, needs_finish = mpi_plan(op, recv.dtype)
    send = MPI.IN_PLACE if sendbuf is recvbuf else [source, datatype]
    mpi.Iallreduce(send, [recv, datatype], mpiop).Wait()
    if needs_finish:
        op.finish(recv.reshape(-1), comm.size)


def _reduce_gathered(op, gathered: np.ndarray, result: np.ndarray, size: int) -> None:
    reduce_in_rank_order(op, gathered, out=result)
    if op.finishes(size):
        op.finish(result, size)


def _raw(array: np.ndarray) -> np.ndarray:
    """The bytes of a contiguous array (any dtype moves as bytes)."""
    return array.reshape(-1).view(np.uint8)
