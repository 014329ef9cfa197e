"""Allreduce: ``ncclAllReduce``.

State arguments: ``(comm, stream, sendbuf, recvbuf, op)``; ``sendbuf is recvbuf`` means in
place.
"""
from __future__ import annotations

from .state import NCCLReduction


class NCCLAllreduce(NCCLReduction):
    name = "allreduce/nccl"

    @staticmethod
    def reduce(ctx, comm, send, recv, count, itemsize, plan, handle):
        ctx.nccl.allReduce(send, recv, count, plan.datatype, plan.op, handle)
