"""The α-β model on two levels: fast links inside a node, one slower link per node between
nodes.  ``costmodel`` is the one-level model it extends.

``N`` nodes of ``L`` ranks each, ranks numbered node by node (as launchers place them);
``intra`` = (α, β) of a message between two ranks of a node, ``inter`` = (α, β) of one
message between two nodes when it has the node's link to itself.  What one level does not
see: every rank of a node that sends to another node at the same time shares that node's
link, so ``k`` such messages of ``m`` bytes cost ``α + k·m·β`` together.

Allreduce of ``n`` bytes:

- ``ring`` (flat, ``p = N·L``): ``2(p − 1)`` steps of ``n/p`` bytes; in each step one message
  per node crosses to the next node, and that step waits for it:
  ``2(p − 1)(α_x + (n/p)·β_x)`` (on one node, the one-level ring with intra parameters).
- ``hierarchical``: a ring reduce-scatter and allgather inside the node,
  ``inside = 2(L − 1)(α_i + (n/L)·β_i)``, and a ring allreduce across nodes of each rank's
  ``n/L`` shard, all ``L`` shards over the node's link at once:
  ``across = 2(N − 1)(α_x + (n/N)·β_x)``.  The vector goes in ``C`` chunks
  (``pipeline_chunks`` at ``β_x``), each crossing while others are reduced in the node, so
  the slower phase sets the pace and the other adds one chunk's worth:
  ``max(inside, across) + min(inside, across)/C`` (``C = 1``: their sum).
- ``recursive_doubling``: ``log2 L`` rounds inside the node (``α_i + n·β_i``), ``log2 N``
  across (``α_x + L·n·β_x``: every rank of the node sends its whole vector).
- ``rabenseifner``: recursive halving then doubling, rounds at distance ``1, 2, 4, ...``
  moving ``n/2, n/4, ...``; a round at distance ≥ ``L`` crosses nodes with ``L`` messages
  (so the large early rounds stay inside the node).

Non-power-of-two rank counts add the one-level model's fold step at inter-node cost.
- ``mpi_passthrough``, MPI's own allreduce: its algorithm is the library's choice, among
  these flat ones (written in C, without our per-step costs), so on a power of two ranks it
  is modelled as the best flat one and listed first, winning the ties: the selector picks
  ours flat across nodes only where MPI's is not offered.  On other rank counts it is
  modelled as recursive doubling with its fold, what Open MPI ran between 3 emulated hosts
  (each host sent twice the vector: three times the bound).  Measured between emulated
  hosts with MPI yielding (docs/hosts.md), MPI's blocking allreduce ran at the link's bound
  on 2 hosts and far ahead of ours on small calls.

Reduce and broadcast of ``n`` bytes (the hierarchical ones pass each node's ``L`` shards of
``n/L`` along a chain of nodes in ``P`` pieces, ``P`` as core/pieces.py cuts the shard;
the ``L`` chains share each link, so a hop moves ``n/P`` bytes over it):

- ``hierarchical`` reduce: a ring reduce-scatter in the node ``(L − 1)(α_i + (n/L)·β_i)``,
  the chain ``(N − 2 + P)(α_x + (n/P)·β_x)``, the root's gather ``α_i + ((L − 1)/L)·n·β_i``;
  the broadcast mirrors it (scatter, chain, ring allgather).
- MPI's own reduce and broadcast are not modelled (which tree MPI uses across nodes is its
  own), so the selector never picks them by the model; measured between emulated hosts
  they were close to the hierarchical ones (docs/hosts.md).

Allgather of ``S`` bytes in all (``S/p`` from each rank):

- ``ring`` (flat): ``p − 1`` steps of ``S/p``, one message per node over its link per step.
- ``hierarchical``: a ring across nodes among same local ranks, ``(N − 1)(α_x + (S/N)·β_x)``
  (``L`` messages of ``S/p`` on the link a step), then a ring in the node,
  ``(L − 1)(α_i + (S/L)·β_i)``.
"""
from __future__ import annotations

from typing import NamedTuple

from .costmodel import AlphaBeta, predict as predict_one_level
from ..core.errors import ArgumentError
from ..core.pieces import DEFAULT_INTER_NODE_BETA, chain_pieces, pipeline_chunks

# The algorithms modelled across nodes, by operation; ties go to the earlier.  On one rank
# per node the hierarchical allreduce is the ring, in pipelined chunks: it wins their tie.
ALGORITHMS = {
    "allreduce": ("mpi_passthrough", "recursive_doubling", "hierarchical", "ring",
                  "rabenseifner"),
    "reduce": ("hierarchical",),
    "bcast": ("hierarchical",),
    "allgather": ("ring", "hierarchical"),
}
# A 1 Gbit/s Ethernet between hosts (α from TCP's round trip here), used until `bench model`
# on a real or emulated cluster writes measured ones into a tuning table.
DEFAULT_INTER = AlphaBeta(alpha=50e-6, beta=DEFAULT_INTER_NODE_BETA)


class Nodes(NamedTuple):
    """How many nodes, and ranks on each (the same on every node)."""

    count: int
    ranks_per_node: int


def predict(op: str, algo: str, nodes: Nodes, nbytes: float, intra: AlphaBeta,
            inter: AlphaBeta) -> float:
    """Predicted seconds of ``op`` on ``nbytes`` with ``algo`` on ``nodes`` (for allgather,
    ``nbytes`` is the gathered result)."""
    if op not in ALGORITHMS:
        raise ArgumentError(f"op: expected one of {list(ALGORITHMS)}, got {op!r}")
    if algo not in ALGORITHMS[op]:
        raise ArgumentError(f"algo: expected one of {list(ALGORITHMS[op])} for {op}, got "
                            f"{algo!r}")
    count, local = nodes
    if count < 1 or local < 1:
        raise ArgumentError(f"nodes: expected at least one node of at least one rank, got "
                            f"{count} nodes of {local}")
    if op == "allreduce":
        return _allreduce(algo, count, local, float(nbytes), intra, inter)
    if count == 1:
        raise ArgumentError(f"nodes: the {op} model is for several nodes, got one of {local}")
    return _ROOTED_AND_GATHERED[op, algo](count, local, float(nbytes), intra, inter)


_FLAT = ("recursive_doubling", "ring", "rabenseifner")


def _allreduce(algo, count, local, n, intra, inter) -> float:
    p = count * local
    if algo == "mpi_passthrough":
        if p & (p - 1):
            return _allreduce("recursive_doubling", count, local, n, intra, inter)
        return min(_allreduce(flat, count, local, n, intra, inter) for flat in _FLAT)
    if count == 1:
        one_level = "ring" if algo == "hierarchical" else algo
        return predict_one_level("allreduce", one_level, p, n, intra.alpha, intra.beta)
    (ai, bi), (ax, bx) = intra, inter
    if algo == "ring":
        return 2 * (p - 1) * (ax + n / p * bx)
    if algo == "hierarchical":
        inside = 2 * (local - 1) * (ai + n / local * bi)
        across = 2 * (count - 1) * (ax + n / count * bx)
        return max(inside, across) + min(inside, across) / pipeline_chunks(n, bx)
    q = 1 << (p.bit_length() - 1)
    fold = 0.0 if q == p else 2 * (ax + n * bx)
    total = fold
    if algo == "recursive_doubling":
        distance = 1
        while distance < q:
            total += (ax + local * n * bx) if distance >= local else (ai + n * bi)
            distance *= 2
        return total
    distance, share = 1, n / 2                          # rabenseifner
    while distance < q:
        step = (ax + local * share * bx) if distance >= local else (ai + share * bi)
        total += 2 * step                               # halving, then doubling back
        distance, share = distance * 2, share / 2
    return total


def _chain(count, local, n, inter) -> float:
    """The hierarchical reduce's or broadcast's chain of nodes, pipelined."""
    pieces = chain_pieces(n / local)
    return (count - 2 + pieces) * (inter.alpha + n / pieces * inter.beta)


def _in_node(local, n, intra, ring: bool) -> float:
    """Inside a node of ``local`` ranks: a ring of ``L − 1`` steps of ``n/L``, or one rank
    sending to (receiving from) all others, ``((L − 1)/L)·n`` through it."""
    if local == 1:
        return 0.0
    if ring:
        return (local - 1) * (intra.alpha + n / local * intra.beta)
    return intra.alpha + (local - 1) / local * n * intra.beta


def _hierarchical_rooted(count, local, n, intra, inter) -> float:
    return _in_node(local, n, intra, ring=True) + _chain(count, local, n, inter) + \
        _in_node(local, n, intra, ring=False)


def _ring_allgather(count, local, n, intra, inter) -> float:
    p = count * local
    return (p - 1) * (inter.alpha + n / p * inter.beta)


def _hierarchical_allgather(count, local, n, intra, inter) -> float:
    return (count - 1) * (inter.alpha + n / count * inter.beta) + \
        _in_node(local, n, intra, ring=True)


_ROOTED_AND_GATHERED = {
    ("reduce", "hierarchical"): _hierarchical_rooted,
    ("bcast", "hierarchical"): _hierarchical_rooted,
    ("allgather", "ring"): _ring_allgather,
    ("allgather", "hierarchical"): _hierarchical_allgather,
}


def best(op: str, nodes: Nodes, nbytes: float, intra: AlphaBeta, inter: AlphaBeta,
         candidates=None) -> str:
    """The candidate (default: every algorithm modelled for ``op``) with the least predicted
    time (ties: the earlier in ``ALGORITHMS[op]``)."""
    known = ALGORITHMS.get(op, ())
    names = [a for a in known if candidates is None or a in candidates]
    if not names:
        raise ArgumentError(f"candidates: expected some of {list(known)} for {op!r}, got "
                            f"{None if candidates is None else list(candidates)!r}")
    return min(names, key=lambda a: (predict(op, a, nodes, nbytes, intra, inter),
                                     known.index(a)))


def crossovers(nodes: Nodes, intra: AlphaBeta, inter: AlphaBeta, sizes, candidates=None,
               op: str = "allreduce") -> list[tuple[int, str]]:
    """(size, winner) at the first size and wherever the winner changes, over ``sizes``."""
    changes: list[tuple[int, str]] = []
    for size in sorted(sizes):
        winner = best(op, nodes, size, intra, inter, candidates)
        if not changes or changes[-1][1] != winner:
            changes.append((size, winner))
    return changes


def least_bytes(op: str, nodes: Nodes, nbytes: float) -> float:
    """The bytes the busiest node must send over its link for ``op`` on ``nbytes``:
    allreduce ``2·n·(N − 1)/N``, reduce and broadcast ``n`` (every node but the root's must
    send, resp. receive, the vector), allgather ``S·(N − 1)/N``."""
    count = nodes.count
    if count == 1:
        return 0.0
    share = {"allreduce": 2 * (count - 1) / count, "allgather": (count - 1) / count}
    return nbytes * share.get(op, 1.0)


def lower_bound(nodes: Nodes, nbytes: float, inter: AlphaBeta, op: str = "allreduce") -> float:
    """The least time ``op`` across ``nodes`` can take on its links: ``least_bytes`` at the
    link's rate."""
    return least_bytes(op, nodes, nbytes) * inter.beta
