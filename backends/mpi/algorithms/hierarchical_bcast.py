"""Hierarchical broadcast: a scatter inside the root's node, each shard along a chain of
the same local rank on every node, an allgather inside each node.

With ``N`` nodes of ``L`` ranks and ``n`` bytes, every node but the root's receives ``n``
bytes over its link, once (``L`` shards of ``n/L``), and every node but the last of the
chain sends ``n``: the least any broadcast can move between nodes.  A flat binomial tree
sends the whole vector into some nodes several times.
"""
from __future__ import annotations

from .node_layout import node_position, require_uniform_nodes
from .program import ProgramState, chain_bcast, partition, ring_allgather


class HierarchicalBcast(ProgramState):
    """Broadcast from ``root`` in three phases:

    1. The root sends block ``r`` of ``L`` blocks to the rank of local rank ``r`` on its
       node.
    2. Block ``r`` travels along a chain of the ranks with local rank ``r`` on every node,
       starting at the root's node and following node order (wrapping), in pipelined
       pieces: each node receives each block once.
    3. Allgather of the ``L`` blocks round each node (on the root's node the root takes
       part with a copy of its buffer, which it only reads: it may be read-only).

    A chain is the bandwidth-optimal shape for long vectors; for short ones on many nodes
    its ``N − 1`` hops in a row cost more latency than a tree's ``log2 N``.  Needs at least
    two nodes of the same number of ranks (``UnsupportedError`` otherwise; the selector
    never picks it there).
    """

    name = "bcast/hierarchical"
    uniform_nodes = True
    multi_node = True

    def __init__(self, comm, stream, buf, root):
        require_uniform_nodes(comm, "hierarchical bcast", "mpi_passthrough", several=True)
        super().__init__(comm)
        self.buf, self.root = buf, root

    def program(self):
        comm, data = self.comm, self.buf.array
        if comm.rank == self.root:
            data = data.copy()   # the allgather writes the blocks it receives
        node, local, across = node_position(comm, comm.rank)
        root_node = next(k for k, ranks in enumerate(comm.nodes) if self.root in ranks)
        offsets = partition(data.size, len(node))
        blocks = [data[offsets[b]:offsets[b + 1]] for b in range(len(node))]
        count = len(across)
        chain = [across[(root_node + j) % count] for j in range(count)]
        if comm.rank == self.root:
            yield from self.wait([self.isend(blocks[b], node[b])
                                  for b in range(len(node)) if node[b] != comm.rank])
        elif chain[0] == comm.rank:          # a rank of the root's node
            yield from self.wait([self.irecv(blocks[local], self.root)])
        yield from chain_bcast(self, blocks[local], chain)
        yield from ring_allgather(self, blocks, node)
