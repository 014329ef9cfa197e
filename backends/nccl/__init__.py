"""The NCCL backend: GPU buffers, every operation through ``cupy.cuda.nccl``.

Registers the ``"nccl"`` backend (algorithm name ``nccl``) behind ``al.NCCLCommunicator``.
Each communicator bootstraps an NCCL communicator once (bootstrap.py: rank 0's unique id
broadcast over MPI); each operation is one small state class (state.py says how blocking
calls are stream-ordered and nonblocking ones run on an internal stream).  NCCL collectives
serve allreduce, reduce, reduce-scatter, allgather and broadcast; grouped sends and receives
(or grouped rooted collectives) serve the v-variants, all-to-all, gathers, scatters and
point-to-point; barrier is a one-element allreduce.  datatypes.py says which dtypes and
reduction ops NCCL computes and how the logical ops are emulated.

Importing this module needs neither cupy nor a GPU; building a communicator needs both on
every rank (``al.UnsupportedError`` on all ranks otherwise).
"""
from __future__ import annotations

from ...core.names import Algorithm, Device
from .. import Backend, register_backend
from .allgather import NCCLAllgather
from .allgatherv import NCCLAllgatherv
from .allreduce import NCCLAllreduce
from .alltoall import NCCLAlltoall
from .alltoallv import NCCLAlltoallv
from .barrier import NCCLBarrier
from .bcast import NCCLBcast
from .bootstrap import setup
from .gather import NCCLGather
from .gatherv import NCCLGatherv
from .multisendrecv import NCCLMultiSendRecv
from .recv import NCCLRecv
from .reduce import NCCLReduce
from .reduce_scatter import NCCLReduceScatter
from .reduce_scatterv import NCCLReduceScatterv
from .scatter import NCCLScatter
from .scatterv import NCCLScatterv
from .send import NCCLSend
from .sendrecv import NCCLSendrecv

ALGORITHM = Algorithm.NCCL

NCCL_OPS = {
    "allreduce": NCCLAllreduce,
    "reduce": NCCLReduce,
    "reduce_scatter": NCCLReduceScatter,
    "reduce_scatterv": NCCLReduceScatterv,
    "allgather": NCCLAllgather,
    "allgatherv": NCCLAllgatherv,
    "alltoall": NCCLAlltoall,
    "alltoallv": NCCLAlltoallv,
    "bcast": NCCLBcast,
    "gather": NCCLGather,
    "gatherv": NCCLGatherv,
    "scatter": NCCLScatter,
    "scatterv": NCCLScatterv,
    "barrier": NCCLBarrier,
    "send": NCCLSend,
    "recv": NCCLRecv,
    "sendrecv": NCCLSendrecv,
    "multisendrecv": NCCLMultiSendRecv,
}


def default_stream():
    """cupy's current stream, or None without a usable GPU (then ``setup`` raises
    ``al.UnsupportedError`` on every rank rather than one rank failing alone)."""
    from ..runtime import cuda_runtime

    runtime = cuda_runtime()
    return runtime.default_stream() if runtime.is_available() else None


NCCL_BACKEND = Backend(name="nccl", ops={op: {ALGORITHM: cls} for op, cls in NCCL_OPS.items()},
                       default_algorithm=ALGORITHM, uses_streams=True,
                       devices=frozenset({Device.CUDA}), default_stream=default_stream, setup=setup)
register_backend(NCCL_BACKEND)
