"""Reduce: ``ncclReduce``.

State arguments: ``(comm, stream, sendbuf, recvbuf, op, root)``.  ``recvbuf`` is None on
every rank but the root (NCCL ignores the receive address there); at the root ``sendbuf is
recvbuf`` means in place.
"""
from __future__ import annotations

from .state import NCCLReduction


class NCCLReduce(NCCLReduction):
    name = "reduce/nccl"

    @staticmethod
    def reduce(ctx, comm, send, recv, count, itemsize, plan, handle, root):
        ctx.nccl.reduce(send, recv, count, plan.datatype, plan.op, root, handle)

    @staticmethod
    def result_span(comm, count, root):
        return (0, count) if comm.rank == root else None
