"""Receive: ``ncclRecv`` into the buffer's bytes.

State arguments: ``(comm, stream, buf, src)``.  NCCL cannot check that the matching send had
the same count (aluminum's rule): a mismatch is undefined behaviour, not an error.
"""
from __future__ import annotations

from ...engine.state import RunType
from .datatypes import BYTES
from .state import NCCLState


class NCCLRecv(NCCLState):
    name = "recv/nccl"
    run_type = RunType.UNBOUNDED

    @classmethod
    def enqueue(cls, ctx, comm, stream, buf, src):
        ctx.nccl.recv(buf.ptr, buf.nbytes, BYTES, src, ctx.device.handle(stream))
        return []
