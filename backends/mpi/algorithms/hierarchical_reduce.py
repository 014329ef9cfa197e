"""Hierarchical reduce: reduce-scatter inside each node, a reduction of each shard across
nodes toward the root's node, a gather inside the root's node.

With ``N`` nodes of ``L`` ranks and ``n`` bytes, every node but the root's sends ``n`` bytes
over its link (its ``L`` reduced shards of ``n/L``, once each) and the root's node sends
none: the least any reduce can send between nodes.  A flat binomial tree sends ``n`` from
every non-root rank, several times ``n`` through some links.
"""
from __future__ import annotations

import numpy as np

from ....core.reduction import sums_in_rank_order
from .node_layout import node_position, require_uniform_nodes
from .program import (ProgramState, chain_reduce, partition, rank_order_allreduce,
                      result_buffer, ring_reduce_scatter)


class HierarchicalReduce(ProgramState):
    """Reduce to ``root`` in three phases:

    1. Reduce-scatter round the ranks of each node: local rank ``r`` ends with its node's
       reduction of block ``r`` of ``L`` blocks.
    2. Block ``r`` is reduced along a chain of the ranks with local rank ``r`` on every
       node, from the node farthest after the root's (in node order, wrapping) to the root's
       node, in pipelined pieces: each node's shard crosses one link once.
    3. The root gathers the ``L`` reduced blocks from the ranks of its node.

    Other ranks' ``buf`` is only read (they reduce in a scratch copy).  Only the root's
    result is defined, and its bits depend on which rank is the root (the chain starts at
    the root's node), not on the mode: blocking, nonblocking and persistent calls run the
    same program.  In deterministic mode the vector is reduced in rank order as the
    allreduce does it (more bytes between nodes).  Needs at least two nodes of the same
    number of ranks (``UnsupportedError`` otherwise; the selector never picks it there).
    """

    name = "reduce/hierarchical"
    uniform_nodes = True
    multi_node = True

    def __init__(self, comm, stream, sendbuf, recvbuf, op, root):
        require_uniform_nodes(comm, "hierarchical reduce", "mpi_passthrough", several=True)
        super().__init__(comm)
        self.sendbuf, self.recvbuf, self.op, self.root = sendbuf, recvbuf, op, root
        self.rank_order = sums_in_rank_order(op, sendbuf.dtype, comm.size)

    def program(self):
        comm = self.comm
        if self.recvbuf is not None:         # the root reduces straight into its result
            work = result_buffer(self.sendbuf, self.recvbuf)
        else:
            work = self.sendbuf.array.copy()
        if self.rank_order:                  # deterministic mode: one order for every algorithm
            yield from rank_order_allreduce(self, work)
            return
        node, local, across = node_position(comm, comm.rank)
        root_node = next(k for k, ranks in enumerate(comm.nodes) if self.root in ranks)
        offsets = partition(work.size, len(node))
        blocks = [work[offsets[b]:offsets[b + 1]] for b in range(len(node))]
        scratch = np.empty(offsets[1], work.dtype)
        yield from ring_reduce_scatter(self, blocks, node, scratch)
        count = len(across)
        chain = [across[(root_node + j) % count] for j in range(count)]
        yield from chain_reduce(self, blocks[local], chain, scratch)
        if comm.rank == self.root:
            yield from self.wait([self.irecv(blocks[b], node[b])
                                  for b in range(len(node)) if node[b] != comm.rank])
            self.op.finish(work, comm.size)
        elif chain[0] == comm.rank:          # a rank of the root's node
            yield from self.wait([self.isend(blocks[local], self.root)])
