"""The MPI backend: host buffers, operations over mpi4py, plus custom algorithms.

Registers the ``"mpi"`` backend: each operation maps algorithm names to ``State`` classes.
"""
from __future__ import annotations

from .. import Backend, register_backend
from .allreduce_passthrough import PassthroughAllreduce


def _automatic(op: str, comm, nbytes: int) -> str:
    return "mpi_passthrough"


MPI_BACKEND = Backend(
    name="mpi",
    ops={
        "allreduce": {"mpi_passthrough": PassthroughAllreduce},
    },
    automatic=_automatic,
)
register_backend(MPI_BACKEND)
