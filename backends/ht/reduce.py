"""Host-transfer reduce: every rank stages its buffer to host, reduce there.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, op, root)``;
``recvbuf`` is None off the root.  Only the root copies a result back; the other ranks'
streams never wait for MPI (Aluminum's early release of non-roots).
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferReduce(HostTransferState):
    name = "reduce/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, op, root):
        super().__init__(comm, stream)
        if recvbuf is None:
            host_send, host_recv = self.staged(sendbuf), None
        else:
            host_send, host_recv = self.staged_pair(sendbuf, recvbuf)
        self.launch("reduce", host_send, host_recv, op, root)
