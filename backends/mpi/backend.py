"""The MPI backend's record: host buffers, every operation over mpi4py, plus custom algorithms.

Registers the ``"mpi"`` backend (importing it imports ``mpi4py.MPI``, which starts MPI).  Each
operation offers ``mpi_passthrough`` (the MPI library's own implementation) and, for some
operations, custom algorithms from ``algorithms/``.
"""
from __future__ import annotations

from ...core.names import Algorithm
from .. import Backend, register_backend
from .algorithms import CUSTOM_ALGORITHMS
from .algorithms.shared_buffers import SharedBuffers
from .passthrough import PASSTHROUGH_OPS


def _op_table() -> dict[str, dict[str, type]]:
    table = {op: {Algorithm.MPI_PASSTHROUGH: cls} for op, cls in PASSTHROUGH_OPS.items()}
    for op, algorithms in CUSTOM_ALGORITHMS.items():
        table.setdefault(op, {}).update(algorithms)
    return table


def _allocate_shared(comm, nbytes: int):
    """Node-shared memory the ``shared_memory`` allreduce reads and writes in place."""
    return SharedBuffers.of(comm).allocate(nbytes)


MPI_BACKEND = Backend(name="mpi", ops=_op_table(), default_algorithm=Algorithm.MPI_PASSTHROUGH,
                      allocate_shared=_allocate_shared)
register_backend(MPI_BACKEND)
