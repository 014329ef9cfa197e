"""Many sends and receives at once: every ``ncclRecv`` and ``ncclSend`` in one group.

State arguments: ``(comm, stream, sends, recvs)``, lists of ``(Buffer, peer)``.  Messages
between one pair of ranks match in list order (NCCL matches per peer in posting order).
"""
from __future__ import annotations

from ...engine.state import RunType
from .datatypes import BYTES
from .state import NCCLState


class NCCLMultiSendRecv(NCCLState):
    name = "multisendrecv/nccl"
    run_type = RunType.UNBOUNDED

    @classmethod
    def enqueue(cls, ctx, comm, stream, sends, recvs):
        handle = ctx.device.handle(stream)
        with ctx.group():
            for buf, peer in recvs:
                ctx.nccl.recv(buf.ptr, buf.nbytes, BYTES, peer, handle)
            for buf, peer in sends:
                ctx.nccl.send(buf.ptr, buf.nbytes, BYTES, peer, handle)
        return []
