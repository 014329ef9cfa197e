"""Reduce-scatter with per-rank counts: one ``ncclReduce`` per rank, grouped.

NCCL has no reduce-scatterv; Aluminum's NCCL backend groups one reduce rooted at each rank
(rank ``r``'s block rooted at ``r``), which NCCL runs as one operation.

State arguments: ``(comm, stream, sendbuf, recvbuf, op, counts)``.  ``sendbuf`` holds
``sum(counts)`` elements in consecutive rank-ordered blocks; ``recvbuf`` ``counts[rank]``.
In place this rank's block is reduced where it lies, then moved to the front.
"""
from __future__ import annotations

import itertools

from .state import NCCLReduction


class NCCLReduceScatterv(NCCLReduction):
    name = "reduce_scatterv/nccl"

    @staticmethod
    def reduce(ctx, comm, send, recv, count, itemsize, plan, handle, counts):
        in_place = recv == send
        with ctx.group():
            for root, (length, offset) in enumerate(zip(counts, _displs(counts))):
                if not length:
                    continue
                block = send + offset * itemsize
                target = recv if root == comm.rank and not in_place else block
                ctx.nccl.reduce(block, target, length, plan.datatype, plan.op, root, handle)

    @staticmethod
    def result_span(comm, count, counts):
        return _displs(counts)[comm.rank], counts[comm.rank]


def _displs(counts) -> list[int]:
    return list(itertools.accumulate(counts[:-1], initial=0))
