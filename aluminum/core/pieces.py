"""How the hierarchical algorithms cut their vectors for the link between nodes: the reduce
and broadcast a shard into pieces along their chain of nodes (backends/mpi/algorithms/
program.py ``chain_reduce``, ``chain_bcast``; the two-level model,
aluminum/tuning/two_level_model.py, predicts them with the same cut), the allreduce its
vector into chunks that cross between nodes while others are reduced inside them
(``pipeline_chunks``).

A chain of ``N`` nodes moving ``P`` pieces takes ``N − 2 + P`` hops of one piece each, so
more pieces bring it closer to one vector's time on one link; each piece costs a message's
latency per hop, hence a floor on their size, and a ceiling on their number bounds the
receives posted at once.
"""
from __future__ import annotations

from typing import Callable

CHAIN_PIECE_BYTES = 256 << 10
MOST_CHAIN_PIECES = 64

# An allreduce chunk is what the link between nodes carries in PIPELINE_CHUNK_S: long next to
# what each chunk costs besides its bytes (a message latency per ring step, an engine step),
# short enough that many chunks keep the link busy while others are reduced in the node.
PIPELINE_CHUNK_S = 1e-3
PIPELINE_MIN_BYTES, PIPELINE_MAX_BYTES = 64 << 10, 1 << 20
# At most (each takes one of the communicator's 32 000 tags per call): enough that chunks of
# a large vector stay messages small enough for TCP to send eagerly (Open MPI's 64 KiB),
# where larger ones wait a round trip each (docs/hosts.md).
PIPELINE_CHUNKS = 128
# On a slow link, a message between nodes longer than this goes as a stream of pieces this
# long: Open MPI's TCP transport sends a message up to its eager limit (64 KiB, headers
# included) at once and a longer one only after a round trip (rendezvous), in a pipeline of
# limited depth; two such long messages leaving one host at once shared its link unevenly,
# the later finishing well after the link's time for both (docs/hosts.md).  A link is slow
# where it takes BETWEEN_NODES_PIECE_MIN_S or more to carry a piece; on a faster one the
# pieces' per-message work costs more than the stalls it saves.
BETWEEN_NODES_PIECE_BYTES = 32 << 10
BETWEEN_NODES_PIECE_MIN_S = 100e-6
# Seconds per byte of the link between nodes until the tuning table says (1 Gbit/s).
DEFAULT_INTER_NODE_BETA = 8e-9
_inter_node_beta: Callable[[], float] = lambda: DEFAULT_INTER_NODE_BETA


def chain_pieces(nbytes: float) -> int:
    """How many pieces a shard of ``nbytes`` travels a chain of nodes in."""
    return max(1, min(MOST_CHAIN_PIECES, int(nbytes) // CHAIN_PIECE_BYTES))


def pipeline_chunks(nbytes: float, inter_node_beta: float | None = None) -> int:
    """How many chunks the hierarchical allreduce's vector of ``nbytes`` crosses nodes in:
    one per ``PIPELINE_CHUNK_S`` of the link's time (``inter_node_beta`` seconds per byte;
    by default what ``read_inter_node_beta`` registered), within the bounds above."""
    beta = _inter_node_beta() if inter_node_beta is None else inter_node_beta
    chunk = min(PIPELINE_MAX_BYTES, max(PIPELINE_MIN_BYTES, PIPELINE_CHUNK_S / beta))
    return max(1, min(PIPELINE_CHUNKS, int(nbytes // chunk)))


def between_nodes_piece() -> int | None:
    """How long the pieces are that a message between nodes longer than them is cut into:
    ``BETWEEN_NODES_PIECE_BYTES`` where the link (``inter_node_beta``) is slow, else None
    (every message goes whole)."""
    if _inter_node_beta() * BETWEEN_NODES_PIECE_BYTES < BETWEEN_NODES_PIECE_MIN_S:
        return None
    return BETWEEN_NODES_PIECE_BYTES


def read_inter_node_beta(read: Callable[[], float]) -> None:
    """Where ``pipeline_chunks`` and ``between_nodes_piece`` read the link's seconds per
    byte: ``read()`` (the tuning table's ``inter_model``; the selector registers it).  Every
    rank must read the same value: the chunks' count sets the tags each call takes, and
    both ends of a message must cut it alike.

    What surprises people: with 3 or more ranks per node or 3 or more nodes, the chunks'
    count also sets which ring step adds which element, so a table with another
    ``inter_model`` can change the last bits of a hierarchical float sum (the same on every
    rank and in every mode; deterministic mode, in rank order, is unaffected)."""
    global _inter_node_beta
    _inter_node_beta = read
