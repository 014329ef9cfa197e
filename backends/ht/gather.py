"""Host-transfer gather: every rank stages its block to host, MPI gather, the root
copies the result back.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, root)``; ``recvbuf``
is None off the root, whose streams never wait for MPI.  In place at the root only its own
block (offset ``root * n``) is copied in.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferGather(HostTransferState):
    name = "gather/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, root):
        super().__init__(comm, stream)
        if recvbuf is None:
            host_send, host_recv = self.staged(sendbuf), None
        else:
            block = recvbuf.count // comm.size
            host_send, host_recv = self.staged_pair(sendbuf, recvbuf,
                                                    d2h_in_place=[(root * block, block)])
        self.launch("gather", host_send, host_recv, root)
