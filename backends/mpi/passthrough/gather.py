"""Gather by calling MPI: ``MPI_Gather`` when blocking, ``MPI_Igather`` when not.

State arguments: ``(comm, stream, sendbuf, recvbuf, root)``.  Every rank sends ``n``
elements; the root's ``recvbuf`` (``size * n``) gets rank ``r``'s at offset ``r * n``.
``recvbuf`` is None on every rank but the root; at the root ``sendbuf is recvbuf`` means in
place, the root's own contribution already sitting at offset ``root * n``.
"""
from __future__ import annotations

from ..datatypes import mpi_datatype
from .mpi_request import MPIRequestState, pair_call, send_spec, spec


class PassthroughGather(MPIRequestState):
    name = "gather/mpi_passthrough"

    def __init__(self, comm, stream, sendbuf, recvbuf, root):
        self.comm, self.sendbuf, self.recvbuf, self.root = comm, sendbuf, recvbuf, root

    @staticmethod
    def run_blocking(comm, stream, sendbuf, recvbuf, root):
        comm._mpi.Gather(*_arguments(sendbuf, recvbuf), root)

    @staticmethod
    def array_call(comm, stream, sendbuf, recvbuf, root):
        call, datatype = comm._mpi.Gather, mpi_datatype(sendbuf.dtype)
        if recvbuf is None:
            return lambda send: call([send, datatype], None, root)
        return pair_call(call, sendbuf, recvbuf, root)

    def post(self):
        return self.comm._mpi.Igather(*_arguments(self.sendbuf, self.recvbuf), self.root)


def _arguments(sendbuf, recvbuf):
    if recvbuf is None:
        return spec(sendbuf), None
    return send_spec(sendbuf, recvbuf), spec(recvbuf)
