"""Operations that call the MPI library directly (algorithm name ``mpi_passthrough``).

``PASSTHROUGH_OPS`` maps each operation name to its State class.
"""
from .allreduce import PassthroughAllreduce

PASSTHROUGH_OPS = {
    "allreduce": PassthroughAllreduce,
}
