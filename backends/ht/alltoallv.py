"""Host-transfer all-to-all with per-rank layouts: stage, all-to-all, unstage.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, send_counts,
send_displs, recv_counts, recv_displs)``.  Only the receive layout's blocks are copied back
(and, in place, copied in), so elements outside them are never written.
"""
from __future__ import annotations

from .host_transfer import HostTransferState, layout_blocks


class HostTransferAlltoallv(HostTransferState):
    name = "alltoallv/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts,
                 recv_displs):
        super().__init__(comm, stream)
        blocks = layout_blocks(recv_counts, recv_displs)
        host_send, host_recv = self.staged_pair(sendbuf, recvbuf, d2h_in_place=blocks,
                                                h2d=blocks)
        self.launch("alltoallv", host_send, host_recv, send_counts,
                    send_displs, recv_counts, recv_displs)
