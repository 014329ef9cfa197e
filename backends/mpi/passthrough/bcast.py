"""Broadcast by calling MPI: ``MPI_Bcast`` when blocking, ``MPI_Ibcast`` when not.

State arguments: ``(comm, stream, buf, root)``: the root's ``buf`` is copied into every
other rank's ``buf``.
"""
from __future__ import annotations

from ..datatypes import mpi_datatype
from .mpi_request import MPIRequestState, spec


class PassthroughBcast(MPIRequestState):
    name = "bcast/mpi_passthrough"

    def __init__(self, comm, stream, buf, root):
        self.comm, self.buf, self.root = comm, buf, root

    @staticmethod
    def run_blocking(comm, stream, buf, root):
        comm._mpi.Bcast(spec(buf), root)

    @staticmethod
    def array_call(comm, stream, buf, root):
        call, datatype = comm._mpi.Bcast, mpi_datatype(buf.dtype)
        return lambda array: call([array, datatype], root)

    def post(self):
        return self.comm._mpi.Ibcast(spec(self.buf), self.root)
