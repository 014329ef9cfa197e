"""Fold any number of ranks onto a power of two, the usual pre/post step of hypercube algorithms.

With ``p = 2^k + r`` ranks, the first ``2r`` ranks pair up: each even rank hands its whole
vector to its odd neighbour and sits out; the odd one takes part for both and hands the
result back at the end.  The ``2^k`` participants are numbered ``0 .. 2^k - 1`` in rank order,
so "lower virtual rank" also means "lower rank".
"""
from __future__ import annotations


class PowerOfTwoFold:
    """This rank's role in the fold: ``sits_out``, ``absorbs`` (takes a neighbour's data) or
    neither; ``partner`` (the neighbour, if any); ``virtual_rank`` among the ``size``
    participants (``None`` when sitting out)."""

    def __init__(self, rank: int, size: int):
        self.size = 1 << (size.bit_length() - 1)
        self._extra = size - self.size
        self.sits_out = rank < 2 * self._extra and rank % 2 == 0
        self.absorbs = rank < 2 * self._extra and rank % 2 == 1
        self.partner = rank + 1 if self.sits_out else rank - 1 if self.absorbs else None
        if self.sits_out:
            self.virtual_rank = None
        elif self.absorbs:
            self.virtual_rank = rank // 2
        else:
            self.virtual_rank = rank - self._extra

    def real_rank(self, virtual_rank: int) -> int:
        """The communicator rank of participant ``virtual_rank``."""
        if virtual_rank < self._extra:
            return 2 * virtual_rank + 1
        return virtual_rank + self._extra


def fold_in(state, fold: PowerOfTwoFold, result, scratch):
    """The fold's first step, for a ``ProgramState``: a rank that sits out hands ``result``
    to its partner and gets the finished vector back (nothing else to do); an absorbing rank
    receives its partner's vector into ``scratch`` and reduces it into ``result``."""
    if fold.sits_out:
        yield from state.wait([state.isend(result, fold.partner)])
        yield from state.wait([state.irecv(result, fold.partner)])
    elif fold.absorbs:
        yield from state.wait([state.irecv(scratch, fold.partner)])
        state.op.reduce_into(result, scratch)


def fold_out(state, fold: PowerOfTwoFold, result):
    """The fold's last step: an absorbing rank hands the finished vector back."""
    if fold.absorbs:
        yield from state.wait([state.isend(result, fold.partner)])
