"""Host-transfer receive: post the receive into host memory at once; the stream waits for
the message, then copies it into the buffer.

State arguments as the MPI backend's: ``(comm, stream, buf, src)``; a message of another
count fails the operation (``al.OperationError``), as on the MPI backend.
"""
from __future__ import annotations

from ...engine.state import RunType
from .host_transfer import HostTransferState


class HostTransferRecv(HostTransferState):
    name = "recv/host_transfer"
    run_type = RunType.UNBOUNDED

    def __init__(self, comm, stream, buf, src):
        super().__init__(comm, stream)
        self.launch("recv", self.staged(buf, d2h=False, h2d=True), src)
