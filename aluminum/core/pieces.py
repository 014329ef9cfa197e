"""How the hierarchical reduce and broadcast cut a shard into pieces along their chain of
nodes (backends/mpi/algorithms/program.py ``chain_reduce``, ``chain_bcast``); the two-level
model (aluminum/tuning/two_level_model.py) predicts them with the same cut.

A chain of ``N`` nodes moving ``P`` pieces takes ``N − 2 + P`` hops of one piece each, so
more pieces bring it closer to one vector's time on one link; each piece costs a message's
latency per hop, hence a floor on their size, and a ceiling on their number bounds the
receives posted at once.
"""
from __future__ import annotations

CHAIN_PIECE_BYTES = 256 << 10
MOST_CHAIN_PIECES = 64


def chain_pieces(nbytes: float) -> int:
    """How many pieces a shard of ``nbytes`` travels a chain of nodes in."""
    return max(1, min(MOST_CHAIN_PIECES, int(nbytes) // CHAIN_PIECE_BYTES))
