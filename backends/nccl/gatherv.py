"""Gather with per-rank counts: sends to the root, grouped receives there.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs, root)``.  Rank ``r``'s
``counts[r]`` elements land at element offset ``displs[r]`` of the root's ``recvbuf``
(None elsewhere).  In place at the root its contribution already sits at ``displs[root]``.
"""
from __future__ import annotations

from .p2p import exchange_blocks, nothing
from .state import NCCLState


class NCCLGatherv(NCCLState):
    name = "gatherv/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf, counts, displs, root):
        sends = nothing(comm)
        if comm.rank != root:
            sends[root] = (sendbuf.nbytes, 0)
            exchange_blocks(ctx, comm, stream, sendbuf.ptr, sends, 0, nothing(comm))
            return []
        itemsize = recvbuf.dtype.itemsize
        if sendbuf is not recvbuf:
            sends[root] = (sendbuf.nbytes, 0)
        receives = [(count * itemsize, displ * itemsize) for count, displ in zip(counts, displs)]
        exchange_blocks(ctx, comm, stream, sendbuf.ptr, sends, recvbuf.ptr, receives)
        return []
