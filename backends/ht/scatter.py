"""Host-transfer scatter: the root stages its buffer to host, MPI scatter, every other
rank copies its block back.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, root)``; ``sendbuf``
is None off the root, which posts at once (nothing to stage in).  In place at the root
(``sendbuf is recvbuf``) nothing is written, so the root's stream never waits for MPI.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferScatter(HostTransferState):
    name = "scatter/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, root):
        super().__init__(comm, stream)
        if sendbuf is None:
            host_send, host_recv = None, self.staged(recvbuf, d2h=False, h2d=True)
        else:   # in place, the root's own block stays where it is: nothing to copy back
            host_send, host_recv = self.staged_pair(sendbuf, recvbuf,
                                                    h2d=sendbuf is not recvbuf)
        self.launch("scatter", host_send, host_recv, root)
