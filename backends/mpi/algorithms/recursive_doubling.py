"""Recursive-doubling allreduce: log2(p) rounds, each swapping the whole vector with the
partner whose rank differs in one bit; latency-optimal, log2(p)(α + nβ)."""
from __future__ import annotations

import numpy as np

from ....core.reduction import sums_in_rank_order
from .power_of_two import PowerOfTwoFold, fold_in, fold_out
from .program import ProgramState, rank_order_allreduce, result_buffer
from .vector_copy import copy_vector


class RecursiveDoublingAllreduce(ProgramState):
    """Allreduce by recursive doubling, with the fold pre/post step for any number of ranks.

    Bit-identical results: both partners of a round compute ``lower-rank data (op)
    higher-rank data`` from the same two vectors, so every participant holds the same bits
    after every round; ranks that sat out receive the finished vector.
    """

    name = "allreduce/recursive_doubling"

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
        scratch = None if fold.sits_out or fold.size == 1 else np.empty_like(result)
        yield from fold_in(self, fold, result, scratch)
        if scratch is not None:
            mine, theirs = result, scratch
            mask = 1
            while mask < fold.size:
                partner = fold.real_rank(fold.virtual_rank ^ mask)
                yield from self.exchange(mine, partner, theirs, partner)
                if fold.virtual_rank & mask:
                    mine, theirs = self.combine(lower=theirs, higher=mine)
                else:
                    mine, theirs = self.combine(lower=mine, higher=theirs)
                mask <<= 1
            if mine is not result:
                copy_vector(result, mine)
        yield from fold_out(self, fold, result)
        self.op.finish(result, self.comm.size)

    def combine(self, lower: np.ndarray, higher: np.ndarray):
        """``lower (op) higher`` into ``lower``; returns ``(combined, free buffer)``."""
        self.op.reduce_into(lower, higher)
        return lower, higher
