"""Send and receive at once: ``MPI_Sendrecv(_replace)`` when blocking, else an ``MPI_Irecv``
and an ``MPI_Isend`` polled together (the multisendrecv state with one of each).

State arguments: ``(comm, stream, sendbuf, dest, recvbuf, src)``; ``sendbuf is recvbuf``
means in place: the buffer is sent to ``dest`` and replaced by the message from ``src``.
Nonblocking in place sends a copy taken at start: MPI-4's ``MPI_Isendrecv(_replace)`` would
avoid it, but Open MPI 5 reports neither truncation nor the true count through them.
"""
from __future__ import annotations

import dataclasses
import functools

from mpi4py import MPI

from ..datatypes import mpi_datatype
from .mpi_call import POINT_TO_POINT_TAG, array_states, posted_states, spec
from .multisendrecv import PassthroughMultiSendRecv, exchange_of, persistent_pairs
from .native_calls import native_array_call, native_call
from .persistent import PersistentRequests
from .recv import array_receive, checked_receive, receive_error

TAG = POINT_TO_POINT_TAG


class PassthroughSendrecv(PassthroughMultiSendRecv):
    name = "sendrecv/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, dest, recvbuf, src):
        super().__init__(comm, stream, [(sendbuf, dest)], [(recvbuf, src)])
        self.in_place = sendbuf is recvbuf

    @classmethod
    def run_blocking(cls, comm, stream, sendbuf, dest, recvbuf, src):
        cls.blocking_call(comm, stream, sendbuf, dest, recvbuf, src)()

    @staticmethod
    def blocking_call(comm, stream, sendbuf, dest, recvbuf, src):
        """``MPI_Sendrecv`` (``_replace`` in place) bound to the buffers and one status,
        then the count check."""
        name, arguments = _call(sendbuf, dest, recvbuf, src)
        mpi = comm.mpi_comm
        native = native_call(mpi, name, arguments, (), receive_error(recvbuf, src))
        if native is not None:
            return native
        status = MPI.Status()
        exchange = functools.partial(getattr(mpi, name), *arguments, status)
        return checked_receive(exchange, status, recvbuf, src)

    @staticmethod
    def array_call(comm, stream, sendbuf, dest, recvbuf, src):
        """``MPI_Sendrecv(_replace)`` on new arrays, as ``blocking_call``'s."""
        name, arguments = _call(sendbuf, dest, recvbuf, src)
        native = native_array_call(comm.mpi_comm, name, arguments,
                                   [0] if sendbuf is recvbuf else [0, 1],
                                   receive_error(recvbuf, src))
        if native is not None:
            return native
        send_type = mpi_datatype(sendbuf.dtype)
        if sendbuf is recvbuf:
            return array_receive(comm.mpi_comm.Sendrecv_replace, recvbuf, src,
                                 lambda buf, datatype, status:
                                 ([buf, datatype], dest, TAG, src, TAG, status))
        return array_receive(comm.mpi_comm.Sendrecv, recvbuf, src,
                             lambda send, recv, datatype, status:
                             ([send, send_type], dest, TAG, [recv, datatype], src, TAG, status))

    @classmethod
    def fresh(cls, comm, stream, sendbuf, dest, recvbuf, src):
        """Out of place, multisendrecv's made-once State of one receive and one send; in
        place, a new State per start (each sends a copy taken at its start)."""
        exchange = None if sendbuf is recvbuf else \
            exchange_of(comm, cls.name, [(sendbuf, dest)], [(recvbuf, src)])
        if exchange is None:
            return functools.partial(cls, comm, stream, sendbuf, dest, recvbuf, src)
        return posted_states(cls, comm, (stream, sendbuf, dest, recvbuf, src), exchange.post)

    @classmethod
    def array_fresh(cls, comm, stream, sendbuf, dest, recvbuf, src):
        """Out of place, multisendrecv's State per call on the new send and receive
        arrays; None in place."""
        if sendbuf is recvbuf:
            return None
        exchange = exchange_of(comm, cls.name, [(sendbuf, dest)], [(recvbuf, src)], [1, 0])
        if exchange is None:
            return None
        return array_states(cls, comm, (stream, sendbuf, dest, recvbuf, src),
                            exchange.post_on_arrays)

    @classmethod
    def persistent(cls, comm, stream, sendbuf, dest, recvbuf, src) -> PersistentRequests | None:
        """A persistent receive and send; None in place (each run would need a copy of
        the buffer to send, which the nonblocking path takes at start) and where
        ``native_calls`` posts and tests the pair (``persistent_pairs``)."""
        if sendbuf is recvbuf:
            return None
        return persistent_pairs(comm, cls.name, [(sendbuf, dest)], [(recvbuf, src)])

    def start(self):
        if self.in_place:
            buf, dest = self.sends[0]
            self.sends = [(dataclasses.replace(buf, array=buf.array.copy()), dest)]
        super().start()


def _call(sendbuf, dest, recvbuf, src) -> tuple[str, tuple]:
    """The blocking call's name and its arguments but the status."""
    if sendbuf is recvbuf:
        return "Sendrecv_replace", (spec(recvbuf), dest, TAG, src, TAG)
    return "Sendrecv", (spec(sendbuf), dest, TAG, spec(recvbuf), src, TAG)
