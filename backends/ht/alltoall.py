"""Host-transfer all-to-all: stage to host, all-to-all there, copy back.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf)``; in place when
``sendbuf is recvbuf``.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferAlltoall(HostTransferState):
    name = "alltoall/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf):
        super().__init__(comm, stream)
        host_send, host_recv = self.staged_pair(sendbuf, recvbuf)
        self.launch("alltoall", host_send, host_recv)
