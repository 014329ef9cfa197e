"""Host-transfer reduce-scatter with per-rank counts: stage, reduce-scatter, unstage.

State arguments as the MPI backend's: ``(comm, stream, sendbuf, recvbuf, op, counts)``.  In
place only this rank's ``counts[rank]`` reduced elements (at the start) are copied back.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferReduceScatterv(HostTransferState):
    name = "reduce_scatterv/host_transfer"

    def __init__(self, comm, stream, sendbuf, recvbuf, op, counts):
        super().__init__(comm, stream)
        host_send, host_recv = self.staged_pair(sendbuf, recvbuf,
                                                h2d=[(0, counts[comm.rank])])
        self.launch("reduce_scatterv", host_send, host_recv, op, counts)
