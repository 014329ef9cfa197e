"""Host-transfer multi-send-receive: stage every send buffer, post all receives and sends on
host memory, copy every message back.

State arguments as the MPI backend's: ``(comm, stream, sends, recvs)``, lists of
``(Buffer, peer)``; messages between one pair of ranks match in list order.
"""
from __future__ import annotations

from ...engine.state import RunType
from .host_transfer import HostTransferState


class HostTransferMultiSendRecv(HostTransferState):
    name = "multisendrecv/host_transfer"
    run_type = RunType.UNBOUNDED

    def __init__(self, comm, stream, sends, recvs):
        super().__init__(comm, stream)
        host_recvs = [(self.staged(buf, d2h=False, h2d=True), peer) for buf, peer in recvs]
        host_sends = [(self.staged(buf), peer) for buf, peer in sends]
        self.launch("multisendrecv", host_sends, host_recvs)
