"""Hierarchical allgather: an allgather across nodes among the ranks of the same local rank,
then an allgather inside each node of what each rank gathered.

With ``N`` nodes of ``L`` ranks, ``n`` bytes per rank and ``S = N·L·n`` in all, every node
sends ``S·(N−1)/N`` bytes over its link and receives as many: its own ``L·n`` bytes reach
each other node once, the least any allgather can move between nodes.  A flat ring over all
``N·L`` ranks crosses the links in ``L`` times as many messages ``L`` times smaller.
"""
from __future__ import annotations

from .node_layout import node_position, require_uniform_nodes
from .program import ProgramState, ring_allgather
from .vector_copy import copy_vector


class HierarchicalAllgather(ProgramState):
    """Allgather in two rings:

    1. Round the ranks with this rank's local rank on every node (one per node): each
       rank's ``n`` elements reach the rank of the same local rank on every node.  A node's
       share of the result is its ranks' contributions, so each rank already holds its
       ``1/L`` of it; no gather inside the node is needed first.
    2. Round the ranks of the node, ``L − 1`` steps: local rank ``r`` forwards the ``N``
       contributions it gathered in 1 (one message each; they lie ``L`` blocks apart when
       nodes hold consecutive ranks).

    ``sendbuf`` holds ``n`` elements, ``recvbuf`` ``size * n``, in rank order; in place
    (``sendbuf is recvbuf``) this rank's contribution already sits at offset ``rank * n``.
    Needs at least two nodes of the same number of ranks (``UnsupportedError`` otherwise;
    the selector never picks it there).
    """

    name = "allgather/hierarchical"
    uniform_nodes = True
    multi_node = True

    def __init__(self, comm, stream, sendbuf, recvbuf):
        require_uniform_nodes(comm, "hierarchical allgather", "ring or mpi_passthrough",
                              several=True)
        super().__init__(comm)
        self.sendbuf, self.recvbuf = sendbuf, recvbuf

    def program(self):
        comm, result = self.comm, self.recvbuf.array
        n = result.size // comm.size
        block = [result[r * n:(r + 1) * n] for r in range(comm.size)]
        if self.sendbuf is not self.recvbuf:
            copy_vector(block[comm.rank], self.sendbuf.array)
        node, local, across = node_position(comm, comm.rank)
        yield from ring_allgather(self, [block[r] for r in across], across)
        # Local rank j's gathered contributions: those of local rank j on every node.
        gathered = [[block[ranks[j]] for ranks in comm.nodes] for j in range(len(node))]
        size, me = len(node), local
        right, left = node[(me + 1) % size], node[(me - 1) % size]
        for s in range(size - 1):
            incoming, outgoing = gathered[(me - s - 1) % size], gathered[(me - s) % size]
            yield from self.wait([self.irecv(b, left) for b in incoming] +
                                 [self.isend(b, right) for b in outgoing])
