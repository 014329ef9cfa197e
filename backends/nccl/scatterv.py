"""Scatter with per-rank counts: grouped sends from the root, a receive everywhere else.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs, root)``.  Rank ``r``'s
``recvbuf`` gets the ``counts[r]`` elements at element offset ``displs[r]`` of the root's
``sendbuf`` (None elsewhere).  In place at the root its block stays at ``displs[root]``.
"""
from __future__ import annotations

from .p2p import exchange_blocks, nothing
from .state import NCCLState


class NCCLScatterv(NCCLState):
    name = "scatterv/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf, counts, displs, root):
        receives = nothing(comm)
        if comm.rank != root:
            receives[root] = (recvbuf.nbytes, 0)
            exchange_blocks(ctx, comm, stream, 0, nothing(comm), recvbuf.ptr, receives)
            return []
        itemsize = sendbuf.dtype.itemsize
        if sendbuf is not recvbuf:
            receives[root] = (recvbuf.nbytes, 0)
        sends = [(count * itemsize, displ * itemsize) for count, displ in zip(counts, displs)]
        exchange_blocks(ctx, comm, stream, sendbuf.ptr, sends, recvbuf.ptr, receives)
        return []
