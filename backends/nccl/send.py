"""Send: ``ncclSend`` of the buffer's bytes.

State arguments: ``(comm, stream, buf, dest)``.  NCCL matches it with ``dest``'s next
receive from this rank; a send blocks its *stream* (not the host) until that receive is
posted, so two ranks that send to each other must use ``sendrecv``.
"""
from __future__ import annotations

from ...engine.state import RunType
from .datatypes import BYTES
from .state import NCCLState


class NCCLSend(NCCLState):
    name = "send/nccl"
    run_type = RunType.UNBOUNDED

    @classmethod
    def enqueue(cls, ctx, comm, stream, buf, dest):
        ctx.nccl.send(buf.ptr, buf.nbytes, BYTES, dest, ctx.device.handle(stream))
        return []
