"""Host-transfer allgather with per-rank counts: stage, allgatherv, unstage.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, counts, displs)``.
Only the blocks of the layout are copied back, so elements of ``recvbuf`` outside every
block are never written.  In place only this rank's block is copied in.
"""
from __future__ import annotations

from .host_transfer import HostTransferState, layout_blocks


class HostTransferAllgatherv(HostTransferState):
    name = "allgatherv/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, counts, displs):
        super().__init__(comm, stream)
        rank = comm.rank
        host_send, host_recv = self.staged_pair(
            sendbuf, recvbuf, d2h_in_place=[(displs[rank], counts[rank])],
            h2d=layout_blocks(counts, displs))
        self.launch("allgatherv", host_send, host_recv, counts, displs)
