"""Allgather: ``ncclAllGather`` on bytes.

State arguments: ``(comm, stream, sendbuf, recvbuf)``.  ``sendbuf`` holds ``n`` elements,
``recvbuf`` ``size * n``; in place (``sendbuf is recvbuf``) this rank's contribution already
sits at offset ``rank * n``, which is NCCL's in-place layout too.
"""
from __future__ import annotations

from .datatypes import BYTES
from .state import NCCLState


class NCCLAllgather(NCCLState):
    name = "allgather/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf):
        block = recvbuf.nbytes // comm.size
        send = recvbuf.ptr + comm.rank * block if sendbuf is recvbuf else sendbuf.ptr
        ctx.nccl.allGather(send, recvbuf.ptr, block, BYTES, ctx.device.handle(stream))
        return []
