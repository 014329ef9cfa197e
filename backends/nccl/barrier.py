"""Barrier: an ``ncclAllReduce`` of one int32 in the communicator's scratch word.

State arguments: ``(comm, stream)``.  Stream-ordered like every NCCL operation: work enqueued
on the stream after the barrier runs only once every rank's stream has reached it.
"""
from __future__ import annotations

from .datatypes import NcclDataType, NcclRedOp
from .state import NCCLState


class NCCLBarrier(NCCLState):
    name = "barrier/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream):
        word = ctx.barrier_word(stream)
        ctx.nccl.allReduce(word, word, 1, NcclDataType.INT32, NcclRedOp.SUM,
                           ctx.device.handle(stream))
        return []
