"""Ring allreduce: a reduce-scatter around the ring, then an allgather around the ring;
bandwidth-optimal, 2(p−1)α + 2((p−1)/p)nβ."""
from __future__ import annotations

import numpy as np

from ....core.reduction import sums_in_rank_order
from .program import (ProgramState, partition, rank_order_allreduce, result_buffer,
                      ring_allgather, ring_reduce_scatter)


class RingAllreduce(ProgramState):
    """Allreduce over a ring of all ranks, the vector cut into ``p`` blocks.

    Reduce-scatter: in step ``s`` each rank passes its partial of block ``rank - s - 1`` to
    its right neighbour and folds block ``rank - s - 2`` arriving from its left into its
    own; after ``p - 1`` steps rank ``r`` holds the full reduction of block ``r``.
    Allgather: the finished blocks travel ``p - 1`` more steps round the ring.  Each block
    is reduced by one chain of ranks, so every rank ends with the same bits.
    """

    name = "allreduce/ring"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        super().__init__(comm)
        self.sendbuf, self.recvbuf, self.op = sendbuf, recvbuf, op
        self.rank_order = sums_in_rank_order(op, recvbuf.dtype, comm.size)

    def program(self):
        result = result_buffer(self.sendbuf, self.recvbuf)
        if self.rank_order:                             # deterministic mode
            yield from rank_order_allreduce(self, result)
            return
        size = self.comm.size
        offsets = partition(result.size, size)
        blocks = [result[offsets[b]:offsets[b + 1]] for b in range(size)]
        ring = list(range(size))
        yield from ring_reduce_scatter(self, blocks, ring, np.empty(offsets[1], result.dtype))
        yield from ring_allgather(self, blocks, ring)
        self.op.finish(result, size)
