"""Host-transfer allreduce: stage the buffer to host, allreduce there, copy back.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, op)``; in place when
``sendbuf is recvbuf``.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferAllreduce(HostTransferState):
    name = "allreduce/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        super().__init__(comm, stream)
        host_send, host_recv = self.staged_pair(sendbuf, recvbuf)
        self.launch("allreduce", host_send, host_recv, op)
