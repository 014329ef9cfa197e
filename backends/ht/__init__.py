"""The host-transfer (HT) backend: device buffers staged through host memory and MPI.

Registers the ``"ht"`` backend (``al.HostTransferCommunicator``).  Every operation is one
``HostTransferState`` subclass (``host_transfer.py`` describes the shared pattern) in its own
file, built with the same arguments as the MPI backend's passthrough State for that operation,
so the public API dispatches to either backend unchanged.  Each operation offers one
algorithm, ``host_transfer``.

Buffers may be CUDA device memory (ordered on a CUDA stream, staged through pinned host
memory) or host memory ordered on a host stream (backends/runtime/host.py: a worker thread
per stream), which runs the very same states on machines without a GPU.  A communicator built
with ``stream=None`` binds cupy's current stream when a GPU is usable, else the process's
default host stream.

Host buffers go to MPI unstaged (see ``host_transfer.py``).  ``AL_HT_STAGE_HOST=1`` in the
environment when a communicator is built makes it stage host buffers through host staging
memory exactly as device buffers are staged, so the GPU path's copies run on CPU-only machines
(the test suite does this).

``AL_HT_BLOCKING=host`` (or ``comm.blocking_mode = "host"``) makes a communicator's blocking
calls wait on the calling thread for their stream and MPI instead of parking the stream on a
host flag (``host_transfer.py``); ``stream``, the default, is Aluminum's semantics.
"""
from __future__ import annotations

import os

from ...core.names import Algorithm, Device
from .. import BLOCKING_MODE_KEY, BLOCKING_MODES, Backend, register_backend
from ..runtime import cuda_runtime, host_runtime
from .allgather import HostTransferAllgather
from .allgatherv import HostTransferAllgatherv
from .allreduce import HostTransferAllreduce
from .alltoall import HostTransferAlltoall
from .alltoallv import HostTransferAlltoallv
from .barrier import HostTransferBarrier
from .bcast import HostTransferBcast
from .gather import HostTransferGather
from .gatherv import HostTransferGatherv
from ...core.errors import ArgumentError
from .host_transfer import STAGE_HOST_KEY
from .multisendrecv import HostTransferMultiSendRecv
from .recv import HostTransferRecv
from .reduce import HostTransferReduce
from .reduce_scatter import HostTransferReduceScatter
from .reduce_scatterv import HostTransferReduceScatterv
from .scatter import HostTransferScatter
from .scatterv import HostTransferScatterv
from .send import HostTransferSend
from .sendrecv import HostTransferSendrecv

ALGORITHM = Algorithm.HOST_TRANSFER

HOST_TRANSFER_OPS = {
    "allreduce": HostTransferAllreduce,
    "reduce": HostTransferReduce,
    "reduce_scatter": HostTransferReduceScatter,
    "reduce_scatterv": HostTransferReduceScatterv,
    "allgather": HostTransferAllgather,
    "allgatherv": HostTransferAllgatherv,
    "alltoall": HostTransferAlltoall,
    "alltoallv": HostTransferAlltoallv,
    "bcast": HostTransferBcast,
    "gather": HostTransferGather,
    "gatherv": HostTransferGatherv,
    "scatter": HostTransferScatter,
    "scatterv": HostTransferScatterv,
    "barrier": HostTransferBarrier,
    "send": HostTransferSend,
    "recv": HostTransferRecv,
    "sendrecv": HostTransferSendrecv,
    "multisendrecv": HostTransferMultiSendRecv,
}


def setup(comm) -> None:
    """Read ``AL_HT_STAGE_HOST`` and ``AL_HT_BLOCKING`` for a new communicator."""
    comm.scratch(STAGE_HOST_KEY, lambda: os.environ.get("AL_HT_STAGE_HOST", "0") == "1")
    mode = os.environ.get("AL_HT_BLOCKING", "stream").strip().lower() or "stream"
    if mode not in BLOCKING_MODES:
        raise ArgumentError(f"AL_HT_BLOCKING: expected one of {', '.join(BLOCKING_MODES)}, "
                            f"got {mode!r}")
    comm.scratch(BLOCKING_MODE_KEY, lambda: mode)


def default_stream():
    """cupy's current stream when a GPU is usable, else the process's default host stream."""
    cuda = cuda_runtime()
    if cuda.is_available():
        return cuda.default_stream()
    return host_runtime().default_stream()


HT_BACKEND = Backend(
    name="ht",
    ops={op: {ALGORITHM: cls} for op, cls in HOST_TRANSFER_OPS.items()},
    default_algorithm=ALGORITHM,
    uses_streams=True,
    devices=frozenset(Device),
    default_stream=default_stream,
    setup=setup,
)
register_backend(HT_BACKEND)
