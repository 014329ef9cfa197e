"""Broadcast by calling MPI: ``MPI_Bcast`` when blocking, ``MPI_Ibcast`` when not.

State arguments: ``(comm, stream, buf, root)``: the root's ``buf`` is copied into every
other rank's ``buf``.
"""
from __future__ import annotations

from .mpi_call import MPICall, MPICalls, spec


class PassthroughBcast(MPICall):
    name = "bcast/mpi_passthrough"
    calls = MPICalls("Bcast", "Ibcast", "Bcast_init")

    @staticmethod
    def arguments(comm, stream, buf, root):
        return spec(buf), root
