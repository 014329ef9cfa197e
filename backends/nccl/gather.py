"""Gather: every rank ``ncclSend``s its block to the root, which ``ncclRecv``s them all in one
group (NCCL has no gather collective).

State arguments: ``(comm, stream, sendbuf, recvbuf, root)``.  The root's ``recvbuf`` (``size
* n`` elements) gets rank ``r``'s ``n`` at offset ``r * n``; ``recvbuf`` is None elsewhere.
In place at the root (``sendbuf is recvbuf``) its own block already sits at ``root * n``.
"""
from __future__ import annotations

from .p2p import exchange_blocks, nothing
from .state import NCCLState


class NCCLGather(NCCLState):
    name = "gather/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf, root):
        sends = nothing(comm)
        if comm.rank != root:
            sends[root] = (sendbuf.nbytes, 0)
            exchange_blocks(ctx, comm, stream, sendbuf.ptr, sends, 0, nothing(comm))
            return []
        block = recvbuf.nbytes // comm.size
        if sendbuf is not recvbuf:
            sends[root] = (block, 0)
        receives = [(block, peer * block) for peer in range(comm.size)]
        exchange_blocks(ctx, comm, stream, sendbuf.ptr, sends, recvbuf.ptr, receives)
        return []
