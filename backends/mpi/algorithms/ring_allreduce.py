"""Ring allreduce: a reduce-scatter around the ring, then an allgather around the ring;
bandwidth-optimal, 2(p−1)α + 2((p−1)/p)nβ."""
from __future__ import annotations

import numpy as np

from ....core.reduction import sums_in_rank_order
from .program import ProgramState, partition, rank_order_allreduce, result_buffer


class RingAllreduce(ProgramState):
    """Allreduce over a ring of all ranks, the vector cut into ``p`` blocks.

    Reduce-scatter: in step ``s`` each rank passes block ``rank - s`` to its right neighbour
    and folds the block ``rank - s - 1`` arriving from its left into its own copy; after
    ``p - 1`` steps rank ``r`` holds the full reduction of block ``r + 1``.  Allgather: the
    finished blocks travel ``p - 1`` more steps round the ring.  Each block is reduced by one
    rank only, so every rank ends with the same bits.
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
        rank, size = self.comm.rank, self.comm.size
        offsets = partition(result.size, size)
        block = [result[offsets[b]:offsets[b + 1]] for b in range(size)]
        right, left = (rank + 1) % size, (rank - 1) % size
        incoming = np.empty(offsets[1], result.dtype)

        for s in range(size - 1):                       # reduce-scatter
            sent, arriving = block[(rank - s) % size], block[(rank - s - 1) % size]
            partial = incoming[:arriving.size]
            yield from self.exchange(sent, right, partial, left)
            self.op.reduce_into(arriving, partial)

        for s in range(size - 1):                       # allgather
            sent, arriving = block[(rank - s + 1) % size], block[(rank - s) % size]
            yield from self.exchange(sent, right, arriving, left)

        self.op.finish(result, size)
