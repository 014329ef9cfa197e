"""Host-transfer send-receive: stage the send buffer, send-receive, copy the message back.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, dest, recvbuf, src)``; in
place (``sendbuf is recvbuf``) the buffer is sent and replaced by the message from ``src``.
"""
from __future__ import annotations

from ...engine.state import RunType
from .host_transfer import HostTransferState


class HostTransferSendrecv(HostTransferState):
    name = "sendrecv/host_transfer"
    run_type = RunType.UNBOUNDED

    def __init__(self, comm, stream, sendbuf, dest, recvbuf, src):
        super().__init__(comm, stream)
        host_send, host_recv = self.staged_pair(sendbuf, recvbuf)
        self.launch("sendrecv", host_send, dest, host_recv, src)
