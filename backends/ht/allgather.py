"""Host-transfer allgather: stage this rank's block to host, allgather there, copy back.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf)``.  In place
(``sendbuf is recvbuf``) only this rank's block, at offset ``rank * n``, is copied in.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferAllgather(HostTransferState):
    name = "allgather/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf):
        super().__init__(comm, stream)
        block = recvbuf.count // comm.size
        host_send, host_recv = self.staged_pair(sendbuf, recvbuf,
                                                d2h_in_place=[(comm.rank * block, block)])
        self.launch("allgather", host_send, host_recv)
