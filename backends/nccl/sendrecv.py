"""Send and receive at once: ``ncclSend`` and ``ncclRecv`` in one group.

State arguments: ``(comm, stream, sendbuf, dest, recvbuf, src)``.  In place (``sendbuf is
recvbuf``) the outgoing bytes are first copied to scratch, as the receive overwrites them.
"""
from __future__ import annotations

from ...engine.state import RunType
from .datatypes import BYTES
from .state import NCCLState, copy_of


class NCCLSendrecv(NCCLState):
    name = "sendrecv/nccl"
    run_type = RunType.UNBOUNDED

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, dest, recvbuf, src):
        scratch, send = [], sendbuf.ptr
        if sendbuf is recvbuf:
            send, scratch = copy_of(ctx, stream, sendbuf)
        handle = ctx.device.handle(stream)
        with ctx.group():
            ctx.nccl.send(send, sendbuf.nbytes, BYTES, dest, handle)
            ctx.nccl.recv(recvbuf.ptr, recvbuf.nbytes, BYTES, src, handle)
        return scratch
