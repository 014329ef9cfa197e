"""Send by calling MPI: ``MPI_Send`` when blocking, ``MPI_Isend`` polled when not.

State arguments: ``(comm, stream, buf, dest)``.  Untagged: messages to one peer match its
receives in posting order.
"""
from __future__ import annotations

from ....engine.state import RunType
from .mpi_call import POINT_TO_POINT_TAG, MPICall, MPICalls, spec


class PassthroughSend(MPICall):
    name = "send/mpi_passthrough"
    run_type = RunType.UNBOUNDED
    calls = MPICalls("Send", "Isend", "Send_init")

    @staticmethod
    def arguments(comm, stream, buf, dest):
        return spec(buf), dest, POINT_TO_POINT_TAG
