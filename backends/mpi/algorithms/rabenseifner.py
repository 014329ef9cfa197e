"""Rabenseifner's allreduce: a recursive-halving reduce-scatter, then a recursive-doubling
allgather; 2 log2(p) α + 2((p−1)/p) nβ."""
from __future__ import annotations

import numpy as np

from ....core.reduction import sums_in_rank_order
from .power_of_two import PowerOfTwoFold, fold_in, fold_out
from .program import ProgramState, partition, rank_order_allreduce, result_buffer


class RabenseifnerAllreduce(ProgramState):
    """Allreduce by recursive halving then recursive doubling, for any number of ranks.

    The vector is cut into one block per participant.  Halving: each round a rank swaps half
    of its current window of blocks with the partner differing in the round's bit, lowest
    first, and reduces the half it keeps, until it owns one block (rank ``r`` the block at
    ``r``'s bits reversed).  Doubling: the owned windows are swapped back, doubling each round,
    highest bit first.  Non-powers of two fold first (see power_of_two.py).  Each block is
    reduced by one rank only: identical bits everywhere.

    The nearest partners swap the most, as in MPICH: ranks numbered node by node swap half
    the vector inside the node and only the last rounds' small windows cross between nodes
    (2 nodes of 2 ranks: a node sends the vector's size over its link, the least any
    allreduce can; partners farthest first would send twice that).
    """

    name = "allreduce/rabenseifner"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        super().__init__(comm)
        self.sendbuf, self.recvbuf, self.op = sendbuf, recvbuf, op
        self.rank_order = sums_in_rank_order(op, recvbuf.dtype, comm.size)

    def program(self):
        result = result_buffer(self.sendbuf, self.recvbuf)
        if self.rank_order:                             # deterministic mode
            yield from rank_order_allreduce(self, result)
            return
        fold = PowerOfTwoFold(self.comm.rank, self.comm.size)
        offsets = partition(result.size, fold.size)
        incoming = None
        if not fold.sits_out and fold.size > 1:
            # The largest half ever kept is the first one (leading blocks are the longer).
            incoming = np.empty(result.size if fold.absorbs else offsets[fold.size >> 1],
                                result.dtype)
        yield from fold_in(self, fold, result, incoming)
        if incoming is not None:
            me = fold.virtual_rank

            def blocks(first: int, stop: int) -> np.ndarray:
                return result[offsets[first]:offsets[stop]]

            lo, hi = 0, fold.size                       # my window, in blocks
            mask = 1
            while mask < fold.size:                     # recursive halving reduce-scatter
                partner = fold.real_rank(me ^ mask)     # (same window: same lower bits)
                mid = (lo + hi) // 2
                keep, give = ((lo, mid), (mid, hi)) if me & mask == 0 else ((mid, hi), (lo, mid))
                kept = blocks(*keep)
                partial = incoming[:kept.size]
                yield from self.exchange(blocks(*give), partner, partial, partner)
                self.op.reduce_into(kept, partial)
                lo, hi = keep
                mask <<= 1

            mask = fold.size >> 1
            while mask:                                 # recursive doubling allgather
                partner = fold.real_rank(me ^ mask)
                width = hi - lo
                theirs = (hi, hi + width) if me & mask == 0 else (lo - width, lo)
                yield from self.exchange(blocks(lo, hi), partner, blocks(*theirs), partner)
                lo, hi = min(lo, theirs[0]), max(hi, theirs[1])
                mask >>= 1
        yield from fold_out(self, fold, result)
        self.op.finish(result, self.comm.size)
