"""Ring allgather: each block travels p−1 steps round the ring; (p−1)α + ((p−1)/p)nβ."""
from __future__ import annotations

from .program import ProgramState, ring_allgather
from .vector_copy import copy_vector


class RingAllgather(ProgramState):
    """Allgather over a ring: every rank ends with every rank's ``n`` elements, in rank order.

    ``sendbuf`` holds ``n`` elements, ``recvbuf`` ``size * n``; in place (``sendbuf is
    recvbuf``) this rank's contribution already sits at offset ``rank * n``.  In step ``s``
    each rank forwards block ``rank - s`` to the right and receives block ``rank - s - 1``
    from the left, straight into ``recvbuf``.
    """

    name = "allgather/ring"

    def __init__(self, comm, stream, sendbuf, recvbuf):
        super().__init__(comm)
        self.sendbuf, self.recvbuf = sendbuf, recvbuf

    def program(self):
        rank, size = self.comm.rank, self.comm.size
        result = self.recvbuf.array
        n = result.size // size
        block = [result[b * n:(b + 1) * n] for b in range(size)]
        if self.sendbuf is not self.recvbuf:
            copy_vector(block[rank], self.sendbuf.array)
        yield from ring_allgather(self, block, list(range(size)))
