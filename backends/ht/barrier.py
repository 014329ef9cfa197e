"""Host-transfer barrier: the stream reaches the barrier, MPI barrier, the stream resumes.

State arguments as the MPI backend's: ``(comm, stream)``.  Nothing is copied; work enqueued
on the stream after the barrier runs only once every rank's stream has reached it.
"""
from __future__ import annotations

from .host_transfer import HostTransferState


class HostTransferBarrier(HostTransferState):
    name = "barrier/host_transfer"

    def __init__(self, comm, stream):
        super().__init__(comm, stream)
        self.launch("barrier", wait_for_stream=True, hold_stream=True)
