"""Host-transfer send: copy the buffer to host; the engine sends once the copy is done.

State arguments as the MPI backend's: ``(comm, stream, buf, dest)``.  The stream never waits
for the message: once the copy is done it may overwrite ``buf``.
"""
from __future__ import annotations

from ...engine.state import RunType
from .host_transfer import HostTransferState


class HostTransferSend(HostTransferState):
    name = "send/host_transfer"
    run_type = RunType.UNBOUNDED

    def __init__(self, comm, stream, buf, dest):
        super().__init__(comm, stream)
        self.launch("send", self.staged(buf), dest)
