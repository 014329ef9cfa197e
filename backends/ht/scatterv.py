"""Host-transfer scatter with per-rank counts: the root stages, scatterv, the
others unstage.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, counts, displs,
root)``; ``sendbuf`` is None off the root.  In place at the root nothing is written.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferScatterv(HostTransferState):
    name = "scatterv/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, counts, displs, root):
        super().__init__(comm, stream)
        if sendbuf is None:
            host_send, host_recv = None, self.staged(recvbuf, d2h=False, h2d=True)
        else:   # in place, the root's own block stays where it is: nothing to copy back
            host_send, host_recv = self.staged_pair(sendbuf, recvbuf,
                                                    h2d=sendbuf is not recvbuf)
        self.launch("scatterv", host_send, host_recv, counts, displs, root)
