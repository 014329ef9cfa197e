"""Many sends and receives at once: post every ``MPI_Irecv`` and ``MPI_Isend``, then wait.

State arguments: ``(comm, stream, sends, recvs)``, lists of ``(Buffer, peer)``.  Receives
are posted first (so matching sends find them posted), each in list order, so several
messages between one pair of ranks match in list order.
"""
from __future__ import annotations

from mpi4py import MPI

from ....engine.state import Action, RunType
from ..datatypes import mpi_datatype
from .mpi_call import POINT_TO_POINT_TAG, spec
from .mpi_errors import MPIState, operation_error
from .native_calls import native_exchange
from .persistent import PersistentRequests
from .recv import check_received, message_error, receive_error


class PassthroughMultiSendRecv(MPIState):
    name = "multisendrecv/mpi_passthrough"
    run_type = RunType.UNBOUNDED

    def __init__(self, comm, stream, sends, recvs):
        self.comm, self.sends, self.recvs = comm, sends, recvs
        self.requests, self.statuses = [], []

    @classmethod
    def run_blocking(cls, comm, stream, sends, recvs):
        try:
            requests = _post(comm, sends, recvs)
        except MPI.Exception as exc:
            raise operation_error(cls.name, exc) from exc
        statuses = [MPI.Status() for _ in requests]
        try:
            MPI.Request.Waitall(requests, statuses)
        except MPI.Exception as exc:
            raise message_error(exc, _sources(recvs)) from exc
        _check(statuses, recvs)

    @classmethod
    def blocking_call(cls, comm, stream, sends, recvs):
        """Every message posted and waited for in one C call where ``native_calls`` can,
        with the count check; else ``run_blocking`` bound to the arguments."""
        exchange = native_exchange(comm.mpi_comm, [(spec(buf), peer) for buf, peer in recvs],
                                   [(spec(buf), peer) for buf, peer in sends],
                                   POINT_TO_POINT_TAG, _exchange_error(cls.name, recvs))
        return exchange or super().blocking_call(comm, stream, sends, recvs)

    @classmethod
    def array_call(cls, comm, stream, sends, recvs):
        """Every message posted and waited for in one C call on new arrays, taken in the
        order their buffers first appear in ``sends`` then ``recvs``; None where
        ``native_calls`` cannot."""
        messages = [*sends, *recvs]
        distinct = list({id(buf.obj): buf.obj for buf, _ in messages})
        exchange = native_exchange(comm.mpi_comm, [(spec(buf), peer) for buf, peer in recvs],
                                   [(spec(buf), peer) for buf, peer in sends],
                                   POINT_TO_POINT_TAG, _exchange_error(cls.name, recvs),
                                   [distinct.index(id(buf.obj)) for buf, _ in
                                    [*recvs, *sends]])
        return None if exchange is None else exchange.on_arrays

    @classmethod
    def persistent(cls, comm, stream, sends, recvs) -> PersistentRequests:
        """``MPI_Recv_init`` and ``MPI_Send_init`` for every pair, started together."""
        return persistent_pairs(comm, cls.name, sends, recvs)

    def start(self):
        self.requests = _post(self.comm, self.sends, self.recvs)
        self.statuses = [MPI.Status() for _ in self.requests]

    def step(self):
        try:
            done = MPI.Request.Testall(self.requests, self.statuses)
        except MPI.Exception as exc:   # (a try costs nothing until it raises; polled often)
            raise message_error(exc, _sources(self.recvs)) from exc
        if not done:
            return Action.CONTINUE
        _check(self.statuses, self.recvs)
        return Action.COMPLETE


def _post(comm, sends, recvs) -> list:
    mpi = comm._mpi
    return ([mpi.Irecv(spec(buf), peer, POINT_TO_POINT_TAG) for buf, peer in recvs]
            + [mpi.Isend(spec(buf), peer, POINT_TO_POINT_TAG) for buf, peer in sends])


def persistent_pairs(comm, name: str, sends, recvs) -> PersistentRequests:
    mpi = comm.mpi_comm
    requests = ([mpi.Recv_init(spec(buf), peer, POINT_TO_POINT_TAG) for buf, peer in recvs]
                + [mpi.Send_init(spec(buf), peer, POINT_TO_POINT_TAG) for buf, peer in sends])
    expected = [(mpi_datatype(buf.dtype), buf.count) for buf, _ in recvs]

    def check(statuses):
        for status, (datatype, count) in zip(statuses, expected):
            if status.Get_count(datatype) != count:
                _check(statuses, recvs)      # raises, saying what came from whom
    return PersistentRequests(comm, name, requests, check,
                              lambda exc: message_error(exc, _sources(recvs)))


def _exchange_error(name: str, recvs):
    """``native_exchange``'s ``on_error`` for ``recvs``: a receive's error is its own
    (``recv.receive_error``), a send's names the operation."""
    receives = [receive_error(buf, peer) for buf, peer in recvs]

    def error(code: int, index: int, count: int) -> Exception:
        if index < len(receives):
            return receives[index](code, count)
        return operation_error(name, MPI.Exception(code))
    return error


def _check(statuses, recvs) -> None:
    for status, (buf, peer) in zip(statuses, recvs):
        check_received(status, buf, peer)


def _sources(recvs) -> str:
    return ", ".join(str(peer) for _, peer in recvs) or "none"
