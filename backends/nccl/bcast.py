"""Broadcast: ``ncclBroadcast`` in place, on bytes.

State arguments: ``(comm, stream, buf, root)``: the root's ``buf`` is copied into every
other rank's ``buf``.
"""
from __future__ import annotations

from .datatypes import BYTES
from .state import NCCLState


class NCCLBcast(NCCLState):
    name = "bcast/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, buf, root):
        ctx.nccl.broadcast(buf.ptr, buf.ptr, buf.nbytes, BYTES, root, ctx.device.handle(stream))
        return []
