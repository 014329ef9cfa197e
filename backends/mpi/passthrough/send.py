"""Send by calling MPI: ``MPI_Send`` when blocking, ``MPI_Isend`` polled when not.

State arguments: ``(comm, stream, buf, dest)``.  Untagged: messages to one peer match its
receives in posting order.
"""
from __future__ import annotations

from ....engine.state import RunType
from ..datatypes import mpi_datatype
from .mpi_request import POINT_TO_POINT_TAG, MPIRequestState, spec


class PassthroughSend(MPIRequestState):
    name = "send/mpi_passthrough"
    run_type = RunType.UNBOUNDED

    def __init__(self, comm, stream, buf, dest):
        self.comm, self.buf, self.dest = comm, buf, dest

    @staticmethod
    def run_blocking(comm, stream, buf, dest):
        comm._mpi.Send(spec(buf), dest, POINT_TO_POINT_TAG)

    @staticmethod
    def array_call(comm, stream, buf, dest):
        call, datatype = comm._mpi.Send, mpi_datatype(buf.dtype)
        return lambda array: call([array, datatype], dest, POINT_TO_POINT_TAG)

    def post(self):
        return self.comm._mpi.Isend(spec(self.buf), self.dest, POINT_TO_POINT_TAG)
