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
  ``2(L − 1)(α_i + (n/L)·β_i)``, plus a ring allreduce across nodes of each rank's ``n/L``
  shard, all ``L`` shards over the node's link at once: ``2(N − 1)(α_x + (n/N)·β_x)``.
- ``recursive_doubling``: ``log2 L`` rounds inside the node (``α_i + n·β_i``), ``log2 N``
  across (``α_x + L·n·β_x``: every rank of the node sends its whole vector).
- ``rabenseifner``: recursive halving then doubling, rounds at distance ``q/2, q/4, ...``
  moving ``n/2, n/4, ...``; a round at distance ≥ ``L`` crosses nodes with ``L`` messages.

Non-power-of-two rank counts add the one-level model's fold step at inter-node cost.  MPI's
own allreduce is not modelled across nodes (its algorithm there is the library's secret),
so the selector never picks it by the model.
"""
from __future__ import annotations

from typing import NamedTuple

from .costmodel import AlphaBeta, predict
from ..core.errors import ArgumentError

ALGORITHMS = ("recursive_doubling", "ring", "rabenseifner", "hierarchical")
# A 1 Gbit/s Ethernet between hosts (α from TCP's round trip here), used until `bench model`
# on a real or emulated cluster writes measured ones into a tuning table.
DEFAULT_INTER = AlphaBeta(alpha=50e-6, beta=8e-9)


class Nodes(NamedTuple):
    """How many nodes, and ranks on each (the same on every node)."""

    count: int
    ranks_per_node: int


def predict_allreduce(algo: str, nodes: Nodes, nbytes: float, intra: AlphaBeta,
                      inter: AlphaBeta) -> float:
    """Predicted seconds of an allreduce of ``nbytes`` with ``algo`` on ``nodes``."""
    if algo not in ALGORITHMS:
        raise ArgumentError(f"algo: expected one of {list(ALGORITHMS)}, got {algo!r}")
    count, local = nodes
    if count < 1 or local < 1:
        raise ArgumentError(f"nodes: expected at least one node of at least one rank, got "
                            f"{count} nodes of {local}")
    p, n = count * local, float(nbytes)
    if count == 1:
        one_level = "ring" if algo == "hierarchical" else algo
        return predict("allreduce", one_level, p, n, intra.alpha, intra.beta)
    (ai, bi), (ax, bx) = intra, inter
    if algo == "ring":
        return 2 * (p - 1) * (ax + n / p * bx)
    if algo == "hierarchical":
        return 2 * (local - 1) * (ai + n / local * bi) + 2 * (count - 1) * (ax + n / count * bx)
    q = 1 << (p.bit_length() - 1)
    fold = 0.0 if q == p else 2 * (ax + n * bx)
    total = fold
    if algo == "recursive_doubling":
        distance = 1
        while distance < q:
            total += (ax + local * n * bx) if distance >= local else (ai + n * bi)
            distance *= 2
        return total
    distance, share = q // 2, n / 2                     # rabenseifner
    while distance >= 1:
        step = (ax + local * share * bx) if distance >= local else (ai + share * bi)
        total += 2 * step                               # halving, then doubling back
        distance, share = distance // 2, share / 2
    return total


def best_allreduce(nodes: Nodes, nbytes: float, intra: AlphaBeta, inter: AlphaBeta,
                   candidates=ALGORITHMS) -> str:
    """The candidate with the least predicted time (ties: the earlier in ALGORITHMS)."""
    names = [a for a in ALGORITHMS if a in candidates]
    if not names:
        raise ArgumentError(f"candidates: expected some of {list(ALGORITHMS)}, got "
                            f"{list(candidates)!r}")
    return min(names, key=lambda a: (predict_allreduce(a, nodes, nbytes, intra, inter),
                                     ALGORITHMS.index(a)))


def crossovers(nodes: Nodes, intra: AlphaBeta, inter: AlphaBeta, sizes,
               candidates=ALGORITHMS) -> list[tuple[int, str]]:
    """(size, winner) at the first size and wherever the winner changes, over ``sizes``."""
    changes: list[tuple[int, str]] = []
    for size in sorted(sizes):
        winner = best_allreduce(nodes, size, intra, inter, candidates)
        if not changes or changes[-1][1] != winner:
            changes.append((size, winner))
    return changes


def lower_bound(nodes: Nodes, nbytes: float, inter: AlphaBeta) -> float:
    """The least time any allreduce across ``nodes`` can take on its links: each node must
    send ``2·n·(N − 1)/N`` bytes over its own."""
    count = nodes.count
    return 0.0 if count == 1 else 2 * nbytes * (count - 1) / count * inter.beta
