"""The MPI backend: host buffers, every operation over mpi4py, plus custom algorithms.

Registers the ``"mpi"`` backend.  Each operation offers ``mpi_passthrough`` (the MPI library's
own implementation) and, for some operations, custom algorithms from ``algorithms/``.
"""
from __future__ import annotations

from .. import Backend, register_backend
from .algorithms import CUSTOM_ALGORITHMS
from .passthrough import PASSTHROUGH_OPS


def _op_table() -> dict[str, dict[str, type]]:
    table = {op: {"mpi_passthrough": cls} for op, cls in PASSTHROUGH_OPS.items()}
    for op, algorithms in CUSTOM_ALGORITHMS.items():
        table.setdefault(op, {}).update(algorithms)
    return table


MPI_BACKEND = Backend(name="mpi", ops=_op_table(), default_algorithm="mpi_passthrough")
register_backend(MPI_BACKEND)
