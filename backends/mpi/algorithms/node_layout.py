"""Where a rank sits among its communicator's nodes, and the refusal where the hierarchical
algorithms cannot run (one node, or nodes of different sizes)."""
from __future__ import annotations

from typing import NamedTuple

from ....core.errors import UnsupportedError


class NodePosition(NamedTuple):
    """One rank's place in a communicator of ``N`` nodes of ``L`` ranks each."""

    node: tuple[int, ...]     # the ranks of its node, in local-rank order
    local: int                # its index in ``node`` (its local rank)
    across: tuple[int, ...]   # the rank with the same local rank on every node, node by node


def node_position(comm, rank: int) -> NodePosition:
    """``rank``'s node, local rank and same-local-rank peers on ``comm`` (``comm.nodes``)."""
    node = next(ranks for ranks in comm.nodes if rank in ranks)
    local = node.index(rank)
    return NodePosition(node, local, tuple(ranks[local] for ranks in comm.nodes))


def require_uniform_nodes(comm, name: str, instead: str, several: bool) -> None:
    """Raise ``UnsupportedError`` naming ``algo`` unless every node of ``comm`` has as many
    ranks, and (``several``) there are at least two nodes; ``instead``: what to use then."""
    sizes = [len(node) for node in comm.nodes]
    if several and len(sizes) < 2:
        raise UnsupportedError(
            f"algo: {name} needs ranks on several nodes; all {comm.size} ranks of this "
            f"communicator are on one node (use {instead})")
    if len(set(sizes)) != 1:
        raise UnsupportedError(
            f"algo: {name} needs the same number of ranks on every node; this "
            f"communicator's {len(sizes)} nodes have {', '.join(map(str, sizes))} ranks "
            f"(use {instead})")
