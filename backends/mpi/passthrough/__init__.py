"""Operations that call the MPI library directly (algorithm name ``mpi_passthrough``).

``PASSTHROUGH_OPS`` maps each operation name to its State class.  Every State is built as
``cls(comm, stream, *op_args)``; each module's docstring fixes its ``op_args``.  Most are an
``MPICall`` (mpi_call.py): the MPI call and how its arguments are built, from which every
form of the operation derives.  Their blocking calls raise ``al.OperationError`` for MPI
failures (``mpi_errors.py``).
"""
from .allgather import PassthroughAllgather
from .allgatherv import PassthroughAllgatherv
from .allreduce import PassthroughAllreduce
from .alltoall import PassthroughAlltoall
from .alltoallv import PassthroughAlltoallv
from .barrier import PassthroughBarrier
from .bcast import PassthroughBcast
from .gather import PassthroughGather
from .gatherv import PassthroughGatherv
from .multisendrecv import PassthroughMultiSendRecv
from .recv import PassthroughRecv
from .reduce import PassthroughReduce
from .reduce_scatter import PassthroughReduceScatter
from .reduce_scatterv import PassthroughReduceScatterv
from .scatter import PassthroughScatter
from .scatterv import PassthroughScatterv
from .send import PassthroughSend
from .sendrecv import PassthroughSendrecv

PASSTHROUGH_OPS = {
    "allreduce": PassthroughAllreduce,
    "reduce": PassthroughReduce,
    "reduce_scatter": PassthroughReduceScatter,
    "reduce_scatterv": PassthroughReduceScatterv,
    "allgather": PassthroughAllgather,
    "allgatherv": PassthroughAllgatherv,
    "alltoall": PassthroughAlltoall,
    "alltoallv": PassthroughAlltoallv,
    "bcast": PassthroughBcast,
    "gather": PassthroughGather,
    "gatherv": PassthroughGatherv,
    "scatter": PassthroughScatter,
    "scatterv": PassthroughScatterv,
    "barrier": PassthroughBarrier,
    "send": PassthroughSend,
    "recv": PassthroughRecv,
    "sendrecv": PassthroughSendrecv,
    "multisendrecv": PassthroughMultiSendRecv,
}
