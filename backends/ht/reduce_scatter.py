"""Host-transfer reduce-scatter: stage to host, reduce-scatter there, copy back.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, op)``.  In place
(``sendbuf is recvbuf``, ``size * n`` elements) only the first ``n`` elements, this rank's
reduced block, are copied back; the rest of the buffer is left as it was.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferReduceScatter(HostTransferState):
    name = "reduce_scatter/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        super().__init__(comm, stream)
        block = recvbuf.count // comm.size if sendbuf is recvbuf else recvbuf.count
        host_send, host_recv = self.staged_pair(sendbuf, recvbuf, h2d=[(0, block)])
        self.launch("reduce_scatter", host_send, host_recv, op)
