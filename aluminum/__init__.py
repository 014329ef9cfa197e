"""aluminum: collective communication for deep learning.

``import aluminum as al``; see README.md for the API in brief and ../shared/DESIGN.md §3.
"""
from .core.compiled import PerformanceWarning, compiled   # (first: AL_PURE_PYTHON's finder)
from .core import dtypes, trace
from .allgather import (allgather, allgather_init, allgatherv, allgatherv_init,
                        nonblocking_allgather, nonblocking_allgatherv)
from .allreduce import allreduce, allreduce_init, nonblocking_allreduce
from .alltoall import (alltoall, alltoall_init, alltoallv, alltoallv_init, nonblocking_alltoall,
                       nonblocking_alltoallv)
from .backends import HostStream
from .barrier import barrier, barrier_init, nonblocking_barrier
from .bcast import bcast, bcast_init, nonblocking_bcast
from .communicator import (Communicator, HostTransferCommunicator, MPICommunicator,
                           NCCLCommunicator)
from .core.names import Algorithm, Buffers, Device, Mode, Placement
from .core.ops import OPS, OpSpec
from .forms import OpCalls, calls_of
from .engine import Request, test_all, wait_all, wait_any
from .core.errors import (AluminumError, ArgumentError, BufferError, CommunicatorError,
                     OperationError, TimeoutError, UnsupportedError)
from .gather import (gather, gather_init, gatherv, gatherv_init, nonblocking_gather,
                     nonblocking_gatherv)
from .plan import Plan
from .pt2pt import (multisendrecv, multisendrecv_init, nonblocking_multisendrecv,
                    nonblocking_recv, nonblocking_send, nonblocking_sendrecv, recv, recv_init,
                    send, send_init, sendrecv, sendrecv_init)
from .reduce import nonblocking_reduce, reduce, reduce_init
from .reduce_scatter import (nonblocking_reduce_scatter, nonblocking_reduce_scatterv,
                             reduce_scatter, reduce_scatter_init, reduce_scatterv,
                             reduce_scatterv_init)
from .core.reduction import ReductionOp, deterministic, set_deterministic
from .runtime import finalize, init, initialized
from .scatter import (nonblocking_scatter, nonblocking_scatterv, scatter, scatter_init,
                      scatterv, scatterv_init)
from .shared import shared_empty
from .buckets import GradientBucket, assign_buckets, bucket_memory, shares_memory
from . import tuning
from .core.compiled import warn_if_uncompiled as _warn_if_uncompiled

_warn_if_uncompiled()

SUM, PROD, MIN, MAX = ReductionOp.SUM, ReductionOp.PROD, ReductionOp.MIN, ReductionOp.MAX
LOR, LAND, LXOR = ReductionOp.LOR, ReductionOp.LAND, ReductionOp.LXOR
BOR, BAND, BXOR = ReductionOp.BOR, ReductionOp.BAND, ReductionOp.BXOR
AVG = ReductionOp.AVG


def __getattr__(name: str):
    if name == "bfloat16":   # (ml_dtypes is imported on first use: core/dtypes.py)
        return dtypes.bfloat16
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "bfloat16"])


def algorithms(op: str, backend: str = "mpi", comm=None) -> list[Algorithm]:
    """The algorithms ``algo=`` accepts for ``op`` on ``backend`` (besides automatic);
    each an ``al.Algorithm``, which is also its plain string name.  With ``comm``, only
    those that run on it (``backend`` is then ``comm``'s): an algorithm that needs every
    rank on one node is left out where ``comm`` spans nodes, one that needs as many ranks
    on every node where node sizes differ."""
    from .backends import get_backend
    from .tuning.selector import runs_on

    if comm is None:
        return get_backend(backend).algorithms(op)
    return [algo for algo in comm.backend.algorithms(op)
            if runs_on(comm, comm.backend.state_class(op, algo))]
