"""Hierarchical allreduce: reduce-scatter inside each node, allreduce across nodes, allgather
inside each node (Horovod's hierarchical allreduce, NCCL's two-level rings).

With ``N`` nodes of ``L`` ranks each and ``n`` bytes, every rank sends ``2(L−1)/L · n`` bytes
to ranks of its own node and ``2(N−1)/(N·L) · n`` bytes to other nodes, so a node as a whole
sends ``2(N−1)/N · n`` bytes over its link: the least any allreduce across ``N`` nodes can
send, where a flat ring over all ``N·L`` ranks crosses the link ``L`` times as often in
messages ``L`` times smaller.
"""
from __future__ import annotations

import numpy as np

from ....core.errors import UnsupportedError
from ....core.reduction import sums_in_rank_order
from .program import ProgramState, partition, rank_order_allreduce, result_buffer


class HierarchicalAllreduce(ProgramState):
    """Allreduce in three rings: over the node, across nodes, over the node again.

    1. Reduce-scatter round the ranks of this node: local rank ``r`` ends with the node's sum
       of block ``r`` of ``L`` blocks.
    2. Ring allreduce of block ``r`` round the ranks that have local rank ``r`` on every
       node (one per node), so block ``r`` holds the sum over all ranks.
    3. Allgather of the ``L`` blocks round the node.

    Every element is reduced by exactly one rank per level and then copied, so every rank
    ends with the same bits; the order of the sum is fixed (node ring, then node order), the
    same for the blocking and the nonblocking call; in deterministic mode it is rank order,
    as in every algorithm (and no longer two-level).  Messages go between the ranks of this
    communicator (no sub-communicators): the ranks of a node from ``comm.nodes``.

    Needs the same number of ranks on every node (``UnsupportedError`` otherwise; the
    selector never picks it there).  On one node it is the node's ring.
    """

    name = "allreduce/hierarchical"
    uniform_nodes = True   # the selector never picks it where nodes differ in size

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        sizes = {len(node) for node in comm.nodes}
        if len(sizes) != 1:
            raise UnsupportedError(
                f"algo: hierarchical needs the same number of ranks on every node; this "
                f"communicator's {len(comm.nodes)} nodes have "
                f"{', '.join(str(len(node)) for node in comm.nodes)} ranks (use ring, "
                f"rabenseifner or mpi_passthrough)")
        super().__init__(comm)
        self.sendbuf, self.recvbuf, self.op = sendbuf, recvbuf, op
        self.rank_order = sums_in_rank_order(op, recvbuf.dtype, comm.size)

    def program(self):
        result = result_buffer(self.sendbuf, self.recvbuf)
        if self.rank_order:                # deterministic mode: one order for every algorithm
            yield from rank_order_allreduce(self, result)
            return
        nodes = self.comm.nodes
        node = next(ranks for ranks in nodes if self.comm.rank in ranks)
        local = node.index(self.comm.rank)
        across = [ranks[local] for ranks in nodes]      # this local rank on every node
        offsets = partition(result.size, len(node))
        blocks = [result[offsets[b]:offsets[b + 1]] for b in range(len(node))]
        scratch = np.empty(offsets[1], result.dtype)

        yield from self.ring_reduce_scatter(blocks, node, scratch)
        mine = blocks[local]
        pieces = partition(mine.size, len(across))
        yield from self.ring_reduce_scatter(
            [mine[pieces[b]:pieces[b + 1]] for b in range(len(across))], across, scratch)
        yield from self.ring_allgather(
            [mine[pieces[b]:pieces[b + 1]] for b in range(len(across))], across)
        yield from self.ring_allgather(blocks, node)
        self.op.finish(result, self.comm.size)

    def ring_reduce_scatter(self, blocks, ring, scratch):
        """Round ``ring`` (ranks of this communicator, this rank among them), leave the
        ring's sum of ``blocks[i]`` in ``blocks[i]`` at the ``i``-th member; the member
        folds what arrives from its left into its own block and passes it on."""
        size, me = len(ring), ring.index(self.comm.rank)
        right, left = ring[(me + 1) % size], ring[(me - 1) % size]
        for s in range(size - 1):
            sent, arriving = blocks[(me - s - 1) % size], blocks[(me - s - 2) % size]
            partial = scratch[:arriving.size]
            yield from self.exchange(sent, right, partial, left)
            self.op.reduce_into(arriving, partial)

    def ring_allgather(self, blocks, ring):
        """Round ``ring``, copy the ``i``-th member's ``blocks[i]`` to every member."""
        size, me = len(ring), ring.index(self.comm.rank)
        right, left = ring[(me + 1) % size], ring[(me - 1) % size]
        for s in range(size - 1):
            yield from self.exchange(blocks[(me - s) % size], right,
                                     blocks[(me - s - 1) % size], left)
