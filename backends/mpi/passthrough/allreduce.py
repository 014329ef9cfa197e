"""Allreduce by calling MPI: ``MPI_Allreduce`` when blocking, ``MPI_Iallreduce`` polled when not.

One answer per call: where the order of the operands changes the bits (floating-point SUM,
PROD and AVG on three ranks or more), the blocking form is ``MPI_Iallreduce`` waited for,
not ``MPI_Allreduce``.  Open MPI reduces in different orders in the two (on 3 ranks here they
differed from 40 KiB to somewhat below 600 KiB of float16), and a blocking call goes through
the nonblocking form anyway when ``AL_TIMEOUT`` is set; plans then take no MPI persistent
request either, whose order MPI does not promise to be the same.  In deterministic mode those
reductions gather every rank's vector (``MPI_Allgather``/``MPI_Iallgather``) and reduce it in
rank order, so they give the custom algorithms' bits: the blocking forms read the mode on
every call, a nonblocking call when it is made.

State arguments: ``(comm, stream, sendbuf, recvbuf, op)``; in place ``sendbuf is recvbuf``.
"""
from __future__ import annotations

import functools

import numpy as np
from mpi4py import MPI

from ....core.reduction import reduce_in_rank_order, sums_in_rank_order
from ....engine.state import Action
from ..datatypes import mpi_plan
from .mpi_call import MPICall, MPICalls


class PassthroughAllreduce(MPICall):
    name = "allreduce/mpi_passthrough"
    calls = MPICalls("Allreduce", "Iallreduce", "Allreduce_init")
    gathered = None   # deterministic mode's nonblocking form: every rank's vector

    rank_order = False   # deterministic mode applies: gather, then reduce in rank order

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        super().__init__(comm, stream, sendbuf, recvbuf, op)
        self.rank_order = sums_in_rank_order(op, recvbuf.dtype, comm.size)

    @classmethod
    def posts_plainly(cls, comm, stream, sendbuf, recvbuf, op):
        """Where deterministic mode can never apply (``order_sensitive`` false): then the
        own ``start`` and ``step`` are ``MPICall``'s; else the constructor reads the mode
        for each start."""
        return not cls.order_sensitive(comm, stream, sendbuf, recvbuf, op)

    @staticmethod
    def arguments(comm, stream, sendbuf, recvbuf, op):
        datatype, mpiop, _ = mpi_plan(op, recvbuf.dtype)
        send = MPI.IN_PLACE if sendbuf is recvbuf else [sendbuf.array, datatype]
        return send, [recvbuf.array, datatype], mpiop

    @staticmethod
    def finishing(comm, stream, sendbuf, recvbuf, op):
        return op, recvbuf, None

    @staticmethod
    def order_sensitive(comm, stream, sendbuf, recvbuf, op):
        return comm.size > 2 and op.order_sensitive(recvbuf.dtype)

    @classmethod
    def blocking_call(cls, comm, stream, sendbuf, recvbuf, op):
        """``MPICall``'s, except that where the order matters deterministic mode is read on
        every call (``_ordered_blocking``)."""
        call = super().blocking_call(comm, stream, sendbuf, recvbuf, op)
        if not cls.order_sensitive(comm, stream, sendbuf, recvbuf, op):
            return call
        return functools.partial(_ordered_blocking, comm, sendbuf, recvbuf, op, call)

    def start(self):
        if not self.rank_order:
            super().start()
            return
        _, sendbuf, recvbuf, _ = self.args
        source = recvbuf.array if sendbuf is recvbuf else sendbuf.array
        self.gathered = np.empty((self.comm.size, source.size), source.dtype)
        self.request = self.comm.mpi_comm.Iallgather(_raw(source), _raw(self.gathered))

    def step(self):
        if self.gathered is None:
            return super().step()
        if not self.request.Test():
            return Action.CONTINUE
        _, _, recvbuf, op = self.args
        _reduce_gathered(op, self.gathered, recvbuf.array, self.comm.size)
        return Action.COMPLETE


def _ordered_blocking(comm, sendbuf, recvbuf, op, waited) -> None:
    """The blocking allreduce of an order-sensitive reduction: in rank order in
    deterministic mode (read per call), else ``waited()`` (``MPI_Iallreduce`` waited for)."""
    if not sums_in_rank_order(op, recvbuf.dtype, comm.size):
        waited()
        return
    recv = recvbuf.array
    source = recv if sendbuf is recvbuf else sendbuf.array
    gathered = np.empty((comm.size, source.size), source.dtype)
    comm.mpi_comm.Allgather(_raw(source), _raw(gathered))
    _reduce_gathered(op, gathered, recv, comm.size)


def _reduce_gathered(op, gathered: np.ndarray, result: np.ndarray, size: int) -> None:
    reduce_in_rank_order(op, gathered, out=result)
    if op.finishes(size):
        op.finish(result, size)


def _raw(array: np.ndarray) -> np.ndarray:
    """The bytes of a contiguous array (any dtype moves as bytes)."""
    return array.reshape(-1).view(np.uint8)
