"""Many sends and receives at once: post every ``MPI_Irecv`` and ``MPI_Isend``, then wait.

State arguments: ``(comm, stream, sends, recvs)``, lists of ``(Buffer, peer)``.  Receives
are posted first (so matching sends find them posted), each in list order, so several
messages between one pair of ranks match in list order.
"""
from __future__ import annotations

from mpi4py import MPI

from ....engine.state import Action, RunType
from ..datatypes import mpi_datatype
from .mpi_call import POINT_TO_POINT_TAG, array_states, posted_states, spec
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
        exchange = exchange_of(comm, cls.name, sends, recvs)
        return exchange or super().blocking_call(comm, stream, sends, recvs)

    @classmethod
    def array_call(cls, comm, stream, sends, recvs):
        """Every message posted and waited for in one C call on new arrays, taken in the
        order their buffers first appear in ``sends`` then ``recvs``; None where
        ``native_calls`` cannot."""
        exchange = exchange_of(comm, cls.name, sends, recvs, _first_seen(sends, recvs))
        return None if exchange is None else exchange.on_arrays

    @classmethod
    def fresh(cls, comm, stream, sends, recvs):
        """A made-once State posting every message in C, its request testing them and
        checking each receive's count (``NativeExchange.post``); where that cannot be, a
        new State per start."""
        exchange = exchange_of(comm, cls.name, sends, recvs)
        if exchange is None:
            return super().fresh(comm, stream, sends, recvs)
        return posted_states(cls, comm, (stream, sends, recvs), exchange.post)

    @classmethod
    def array_fresh(cls, comm, stream, sends, recvs):
        """A new State per call on new arrays (taken as ``array_call`` takes them), posting
        every message on them in C as ``fresh``'s; None where that cannot be."""
        exchange = exchange_of(comm, cls.name, sends, recvs, _first_seen(sends, recvs))
        if exchange is None:
            return None
        return array_states(cls, comm, (stream, sends, recvs), exchange.post_on_arrays)

    @classmethod
    def persistent(cls, comm, stream, sends, recvs) -> PersistentRequests | None:
        """``MPI_Recv_init`` and ``MPI_Send_init`` for every pair, started together; None
        where ``native_calls`` posts and tests the messages (``persistent_pairs``)."""
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


def exchange_of(comm, name: str, sends, recvs, arrays: list | None = None):
    """``native_exchange`` of these messages (lists of ``(Buffer, peer)``) under the
    point-to-point tag, raising the errors of operation ``name``; ``arrays`` as there."""
    return native_exchange(comm.mpi_comm, [(spec(buf), peer) for buf, peer in recvs],
                           [(spec(buf), peer) for buf, peer in sends], POINT_TO_POINT_TAG,
                           _exchange_error(name, recvs), arrays)


def _first_seen(sends, recvs) -> list:
    """For each message, receives first, the index of its array among the distinct arrays
    of ``sends`` then ``recvs`` in the order they first appear (how the forms on new arrays
    take them)."""
    distinct = list({id(buf.obj): buf.obj for buf, _ in [*sends, *recvs]})
    return [distinct.index(id(buf.obj)) for buf, _ in [*recvs, *sends]]


def _post(comm, sends, recvs) -> list:
    mpi = comm._mpi
    return ([mpi.Irecv(spec(buf), peer, POINT_TO_POINT_TAG) for buf, peer in recvs]
            + [mpi.Isend(spec(buf), peer, POINT_TO_POINT_TAG) for buf, peer in sends])


def persistent_pairs(comm, name: str, sends, recvs) -> PersistentRequests | None:
    """Persistent requests for the messages of ``sends`` and ``recvs``, started together;
    None where ``native_calls`` can post and test them (``exchange_of``): a plan then runs
    and starts that exchange, in C, which costs less per run than mpi4py's ``Startall``
    and ``Testall`` on persistent requests, and matches the same messages."""
    if exchange_of(comm, name, sends, recvs) is not None:
        return None
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
