"""aluminum: collective communication for deep learning.

``import aluminum as al``; see README.md for the API in brief and ../shared/DESIGN.md §3.
"""
from .core import dtypes
from .allgather import allgather, allgatherv, nonblocking_allgather, nonblocking_allgatherv
from .allreduce import allreduce, nonblocking_allreduce
from .alltoall import alltoall, alltoallv, nonblocking_alltoall, nonblocking_alltoallv
from .barrier import barrier, nonblocking_barrier
from .bcast import bcast, nonblocking_bcast
from .communicator import (Communicator, HostTransferCommunicator, MPICommunicator,
                           NCCLCommunicator)
from .core.dtypes import bfloat16
from .engine import Request, test_all, wait_all, wait_any
from .core.errors import (AluminumError, ArgumentError, BufferError, CommunicatorError,
                     OperationError, TimeoutError, UnsupportedError)
from .gather import gather, gatherv, nonblocking_gather, nonblocking_gatherv
from .pt2pt import (multisendrecv, nonblocking_multisendrecv, nonblocking_recv,
                    nonblocking_send, nonblocking_sendrecv, recv, send, sendrecv)
from .reduce import nonblocking_reduce, reduce
from .reduce_scatter import (nonblocking_reduce_scatter, nonblocking_reduce_scatterv,
                             reduce_scatter, reduce_scatterv)
from .core.reduction import ReductionOp
from .runtime import finalize, init, initialized
from .scatter import nonblocking_scatter, nonblocking_scatterv, scatter, scatterv
from .shared import shared_empty

SUM, PROD, MIN, MAX = ReductionOp.SUM, ReductionOp.PROD, ReductionOp.MIN, ReductionOp.MAX
LOR, LAND, LXOR = ReductionOp.LOR, ReductionOp.LAND, ReductionOp.LXOR
BOR, BAND, BXOR = ReductionOp.BOR, ReductionOp.BAND, ReductionOp.BXOR
AVG = ReductionOp.AVG


def algorithms(op: str, backend: str = "mpi") -> list[str]:
    """The algorithm names ``algo=`` accepts for ``op`` on ``backend``."""
    from .backends import get_backend

    return get_backend(backend).algorithms(op)
