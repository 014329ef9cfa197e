"""Allgather with per-rank counts: one ``ncclBroadcast`` rooted at each rank, grouped.

State arguments: ``(comm, stream, sendbuf, recvbuf, counts, displs)``.  Rank ``r``'s
``counts[r]`` elements land at element offset ``displs[r]`` of ``recvbuf``; in place
(``sendbuf is recvbuf``) this rank's contribution already sits at ``displs[rank]`` and is
broadcast from there.
"""
from __future__ import annotations

from .datatypes import BYTES
from .state import NCCLState


class NCCLAllgatherv(NCCLState):
    name = "allgatherv/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf, counts, displs):
        itemsize, handle = recvbuf.dtype.itemsize, ctx.device.handle(stream)
        with ctx.group():
            for root, (count, displ) in enumerate(zip(counts, displs)):
                if not count:
                    continue
                target = recvbuf.ptr + displ * itemsize
                source = sendbuf.ptr if root == comm.rank and sendbuf is not recvbuf else target
                ctx.nccl.broadcast(source, target, count * itemsize, BYTES, root, handle)
        return []
