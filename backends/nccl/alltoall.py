"""All-to-all: grouped ``ncclSend``/``ncclRecv`` of one block per peer (NCCL has no
all-to-all collective); the block for this rank itself is a device copy.

State arguments: ``(comm, stream, sendbuf, recvbuf)``: ``size`` equal blocks each.  In place
(``sendbuf is recvbuf``) the blocks are first copied to scratch, since the receives overwrite
what the sends read.
"""
from __future__ import annotations

from .p2p import exchange_blocks
from .state import NCCLState, copy_of


class NCCLAlltoall(NCCLState):
    name = "alltoall/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf):
        scratch, send = [], sendbuf.ptr
        if sendbuf is recvbuf:
            send, scratch = copy_of(ctx, stream, sendbuf)
        block = recvbuf.nbytes // comm.size
        layout = [(block, peer * block) for peer in range(comm.size)]
        exchange_blocks(ctx, comm, stream, send, layout, recvbuf.ptr, layout)
        return scratch
