"""Scatter: the root ``ncclSend``s block ``r`` to each rank ``r`` in one group; every other
rank ``ncclRecv``s its block.

State arguments: ``(comm, stream, sendbuf, recvbuf, root)``.  The root's ``sendbuf`` holds
``size * n`` elements (None elsewhere); rank ``r``'s ``recvbuf`` gets the ``n`` at ``r * n``.
In place at the root (``sendbuf is recvbuf``) its own block stays where it is.
"""
from __future__ import annotations

from .p2p import exchange_blocks, nothing
from .state import NCCLState


class NCCLScatter(NCCLState):
    name = "scatter/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf, root):
        receives = nothing(comm)
        if comm.rank != root:
            receives[root] = (recvbuf.nbytes, 0)
            exchange_blocks(ctx, comm, stream, 0, nothing(comm), recvbuf.ptr, receives)
            return []
        block = sendbuf.nbytes // comm.size
        if sendbuf is not recvbuf:
            receives[root] = (block, 0)
        sends = [(block, peer * block) for peer in range(comm.size)]
        exchange_blocks(ctx, comm, stream, sendbuf.ptr, sends, recvbuf.ptr, receives)
        return []
