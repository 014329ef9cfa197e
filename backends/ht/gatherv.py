"""Host-transfer gather with per-rank counts: stage, gatherv, the root unstages.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, counts, displs,
root)``; ``recvbuf`` is None off the root, whose streams never wait for MPI.  The root copies
back only the layout's blocks, so its other elements are never written.
"""
from __future__ import annotations

from .host_transfer import HostTransferState, layout_blocks


class HostTransferGatherv(HostTransferState):
    name = "gatherv/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, counts, displs, root):
        super().__init__(comm, stream)
        if recvbuf is None:
            host_send, host_recv = self.staged(sendbuf), None
        else:
            host_send, host_recv = self.staged_pair(
                sendbuf, recvbuf, d2h_in_place=[(displs[root], counts[root])],
                h2d=layout_blocks(counts, displs))
        self.launch("gatherv", host_send, host_recv, counts, displs, root)
