"""Receive by calling MPI: ``MPI_Recv`` when blocking, ``MPI_Irecv`` polled when not.

State arguments: ``(comm, stream, buf, src)``.  Aluminum's rule that a receive matches a send
of the same count is checked: a message of any other length raises ``al.OperationError``
(except that Open MPI's self transport silently truncates a longer message a rank sends to
itself into a receive that was already posted).
"""
from __future__ import annotations

import dataclasses
import functools

from mpi4py import MPI

from ....core.errors import OperationError
from ....engine.state import Action, RunType
from ..datatypes import mpi_datatype
from .mpi_call import POINT_TO_POINT_TAG, MPICall, MPICalls, array_states, posted_states, spec
from .native_calls import (native_array_call, native_array_post, native_call, native_persistent,
                           native_post)
from .persistent import PersistentRequest, PersistentRequests


class PassthroughRecv(MPICall):
    """Every form checks what was received (``check_received``): the blocking and persistent
    ones through a status of their own, the nonblocking one through the State's."""

    name = "recv/mpi_passthrough"
    run_type = RunType.UNBOUNDED
    calls = MPICalls("Recv", "Irecv", "Recv_init")

    def __init__(self, comm, stream, buf, src):
        super().__init__(comm, stream, buf, src)
        self.status = MPI.Status()

    @staticmethod
    def arguments(comm, stream, buf, src):
        return spec(buf), src, POINT_TO_POINT_TAG

    @classmethod
    def blocking_call(cls, comm, stream, buf, src):
        """``MPI_Recv`` bound to the buffer and one status, then the count check."""
        arguments = cls.arguments(comm, stream, buf, src)
        native = native_call(comm.mpi_comm, "Recv", arguments, (),
                             receive_error(buf, src))
        if native is not None:
            return native
        status = MPI.Status()
        receive = functools.partial(comm.mpi_comm.Recv, *arguments, status)
        return checked_receive(receive, status, buf, src)

    @classmethod
    def array_call(cls, comm, stream, buf, src):
        """``MPI_Recv`` into new arrays, with a status of its own per call, then the
        count check (as ``blocking_call``'s)."""
        native = native_array_call(comm.mpi_comm, "Recv", cls.arguments(comm, stream, buf, src),
                                   [0], receive_error(buf, src))
        return native or array_receive(comm.mpi_comm.Recv, buf, src,
                                       lambda array, datatype, status:
                                       ([array, datatype], src, POINT_TO_POINT_TAG, status))

    @classmethod
    def fresh(cls, comm, stream, buf, src):
        """A made-once State posting ``MPI_Irecv`` in C, its request checking the count
        (``native_post``); where that cannot be, a new State per start."""
        post = native_post(comm.mpi_comm, "Irecv", cls.arguments(comm, stream, buf, src),
                           receive_error(buf, src))
        if post is None:
            return functools.partial(cls, comm, stream, buf, src)
        return posted_states(cls, comm, (stream, buf, src), post)

    @classmethod
    def array_fresh(cls, comm, stream, buf, src):
        """A new State per call on new arrays, posting ``MPI_Irecv`` on them in C (as
        ``fresh``'s); None where that cannot be."""
        post = native_array_post(comm.mpi_comm, "Irecv", cls.arguments(comm, stream, buf, src),
                                 [0], receive_error(buf, src))
        return None if post is None else array_states(cls, comm, (stream, buf, src), post)

    @classmethod
    def persistent(cls, comm, stream, buf, src) -> PersistentRequest:
        """``MPI_Recv_init`` on the plan's buffer; each run checks the received count (in C
        where ``native_persistent`` can)."""
        arguments = cls.arguments(comm, stream, buf, src)
        request = comm.mpi_comm.Recv_init(*arguments)
        datatype = mpi_datatype(buf.dtype)
        native = native_persistent(request, (buf.count, datatype, receive_error(buf, src)),
                                   arguments)
        if native is not None:
            return PersistentRequest(comm, cls.name, request, None, native)

        def check(statuses):
            if statuses[0].Get_count(datatype) != buf.count:
                check_received(statuses[0], buf, src)    # raises, saying what came
        return PersistentRequests(comm, cls.name, [request], check,
                                  lambda exc: message_error(exc, src))

    def step(self):
        try:
            if not self.request.Test(self.status):
                return Action.CONTINUE
        except MPI.Exception as exc:   # (a try costs nothing until it raises; polled often)
            raise message_error(exc, self.args[2]) from exc
        _, buf, src = self.args
        check_received(self.status, buf, src)
        return Action.COMPLETE


def checked_receive(receive, status: MPI.Status, buf, src: int):
    """``receive()``, a blocking MPI call receiving ``buf`` from ``src`` into ``status``,
    made to raise ``al.OperationError`` for a truncated message or one of another count."""
    datatype, count = mpi_datatype(buf.dtype), buf.count

    def call():
        try:
            receive()
        except MPI.Exception as exc:
            raise message_error(exc, src) from exc
        if status.Get_count(datatype) != count:
            check_received(status, buf, src)    # raises, saying what came
    return call


def array_receive(receive, buf, src: int, arguments):
    """An ``array_call`` callable receiving from ``src`` into new arrays of ``buf``'s kind:
    ``receive(*arguments(array, datatype, status))`` (the receive's array last among the
    arrays), then the count check, raising as ``checked_receive``'s call."""
    datatype, count, Status = mpi_datatype(buf.dtype), buf.count, MPI.Status
    error = receive_error(buf, src)

    def call(*arrays):
        status = Status()
        try:
            receive(*arguments(*arrays, datatype, status))
        except MPI.Exception as exc:
            raise error(exc.Get_error_code(), -1) from exc
        got = status.Get_count(datatype)
        if got != count:
            raise error(0, got)
    return call


def receive_error(buf, src: int):
    """``native_calls``' ``on_error`` of a receive of ``buf`` from ``src``: the
    ``al.OperationError`` for an MPI error code, or for a message of another count."""
    expected = dataclasses.replace(buf, obj=None, array=None, address=None)  # (for messages)

    def error(code: int, count: int) -> OperationError:
        if code:
            return message_error(MPI.Exception(code), src)
        return count_error(count, expected, src)
    return error


def check_received(status: MPI.Status, buf, src: int) -> None:
    """Raise unless the message from ``src`` had exactly ``buf``'s element count."""
    count = status.Get_count(mpi_datatype(buf.dtype))
    if count != buf.count:
        raise count_error(count, buf, src)


def count_error(count: int, buf, src: int) -> OperationError:
    """The error of a receive of ``buf`` from ``src`` that got ``count`` elements."""
    return OperationError(f"recv from rank {src}: expected a message of {buf.describe()}, the "
                          f"matching send had {count}; a receive must match a send of the "
                          f"same count")


def message_error(exc: MPI.Exception, src) -> OperationError:
    """The ``al.OperationError`` for MPI's receive error ``exc`` on a receive from ``src``."""
    return OperationError(f"recv from rank {src}: {exc.Get_error_string()}; a receive must "
                          f"match a send of the same count")
