"""Reduce-scatter: ``ncclReduceScatter``.

State arguments: ``(comm, stream, sendbuf, recvbuf, op)``.  ``sendbuf`` holds ``size * n``
elements, ``recvbuf`` ``n``.  In place (``sendbuf is recvbuf``) NCCL leaves this rank's block
at offset ``rank * n``; it is then copied to the front, where aluminum's in-place semantics
put it (the rest of the buffer is unspecified).
"""
from __future__ import annotations

from .state import NCCLReduction


class NCCLReduceScatter(NCCLReduction):
    name = "reduce_scatter/nccl"

    @staticmethod
    def reduce(ctx, comm, send, recv, count, itemsize, plan, handle):
        block = count // comm.size
        if recv == send:
            recv = send + comm.rank * block * itemsize
        ctx.nccl.reduceScatter(send, recv, block, plan.datatype, plan.op, handle)

    @staticmethod
    def result_span(comm, count):
        block = count // comm.size
        return comm.rank * block, block
