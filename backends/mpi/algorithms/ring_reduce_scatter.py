"""Ring reduce-scatter: partial sums travel p−1 steps round the ring; (p−1)α + ((p−1)/p)nβ."""
from __future__ import annotations

import numpy as np

from .program import ProgramState
from .vector_copy import copy_vector


class RingReduceScatter(ProgramState):
    """Reduce-scatter over a ring: rank ``r`` ends with block ``r`` of the reduction.

    ``sendbuf`` holds ``size * n`` elements, ``recvbuf`` ``n``; in place (``sendbuf is
    recvbuf``, holding ``size * n``) the result lands in its first ``n`` elements.  In step
    ``s`` each rank sends its running partial of block ``rank - s - 1`` to the right and
    receives the partial of block ``rank - s - 2`` from the left, adding its own contribution;
    the partial it receives last is block ``rank``.  ``sendbuf`` is only read.
    """

    name = "reduce_scatter/ring"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        super().__init__(comm)
        self.sendbuf, self.recvbuf, self.op = sendbuf, recvbuf, op

    def program(self):
        rank, size = self.comm.rank, self.comm.size
        send = self.sendbuf.array
        n = send.size // size
        result = self.recvbuf.array[:n]
        mine = [send[b * n:(b + 1) * n] for b in range(size)]
        right, left = (rank + 1) % size, (rank - 1) % size

        scratch = (np.empty(n, send.dtype), np.empty(n, send.dtype) if size > 2 else None)
        outgoing = mine[(rank - 1) % size]
        for s in range(size - 1):
            incoming = scratch[s % 2]           # never the buffer still being sent
            yield from self.exchange(outgoing, right, incoming, left)
            self.op.reduce_into(incoming, mine[(rank - s - 2) % size])
            outgoing = incoming
        copy_vector(result, outgoing)
        self.op.finish(result, size)
