"""Host-transfer broadcast: the root stages its buffer to host, MPI broadcast, others copy
the result back.

State arguments as the MPI backend's: ``(comm, stream, buf, root)``.  The root's stream never
waits for MPI (its buffer is only read); the other ranks post at once (nothing to stage in)
and their streams wait for the data.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferBcast(HostTransferState):
    name = "bcast/host_transfer"

    def __init__(self, comm, stream, buf, root):
        super().__init__(comm, stream)
        if comm.rank == root:
            host_buf = self.staged(buf)
        else:
            host_buf = self.staged(buf, d2h=False, h2d=True)
        self.launch("bcast", host_buf, root)
