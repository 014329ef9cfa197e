"""Hierarchical allreduce: reduce-scatter inside each node, allreduce across nodes, allgather
inside each node (Horovod's hierarchical allreduce, NCCL's two-level rings).

With ``N`` nodes of ``L`` ranks each and ``n`` bytes, every rank sends ``2(L−1)/L · n`` bytes
to ranks of its own node and ``2(N−1)/(N·L) · n`` bytes to other nodes, so a node as a whole
sends ``2(N−1)/N · n`` bytes over its link: the least any allreduce across ``N`` nodes can
send, where a flat ring over all ``N·L`` ranks crosses the link ``L`` times as often in
messages ``L`` times smaller.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ....core.reduction import sums_in_rank_order
from .node_layout import node_position, require_uniform_nodes
from .program import (ProgramState, partition, pipeline_chunks, rank_order_allreduce,
                      result_buffer, ring_allgather, ring_reduce_scatter)

# Chunks in flight at once: one crossing between nodes while the next is reduced in them.
IN_FLIGHT = 2


class HierarchicalAllreduce(ProgramState):
    """Allreduce in three rings: over the node, across nodes, over the node again.

    1. Reduce-scatter round the ranks of this node: local rank ``r`` ends with the node's sum
       of block ``r`` of ``L`` blocks.
    2. Ring allreduce of block ``r`` round the ranks that have local rank ``r`` on every
       node (one per node), so block ``r`` holds the sum over all ranks.
    3. Allgather of the ``L`` blocks round the node.

    Across nodes the vector is cut into chunks (``pipeline_chunks``) run two at a time, so
    the link carries one chunk while the ranks reduce the next inside the node.

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
        require_uniform_nodes(comm, "hierarchical", "ring, rabenseifner or mpi_passthrough",
                              several=False)
        super().__init__(comm)
        self.sendbuf, self.recvbuf, self.op = sendbuf, recvbuf, op
        self.rank_order = sums_in_rank_order(op, recvbuf.dtype, comm.size)
        # Across nodes the vector goes in chunks, each with a tag of its own (taken here,
        # in issue order, so alike on every rank): chunks in flight never match each
        # other's messages.
        chunks = 1 if len(comm.nodes) == 1 else pipeline_chunks(recvbuf.array.nbytes)
        self.tags = [self.tag] + [comm.next_tag() for _ in range(chunks - 1)]

    def program(self):
        result = result_buffer(self.sendbuf, self.recvbuf)
        if self.rank_order:                # deterministic mode: one order for every algorithm
            yield from rank_order_allreduce(self, result)
            return
        node, local, across = node_position(self.comm, self.comm.rank)
        bounds = partition(result.size, len(self.tags))
        yield from self.interleave(deque(
            self.three_rings(result[bounds[c]:bounds[c + 1]], node, local, across, tag)
            for c, tag in enumerate(self.tags)))
        self.op.finish(result, self.comm.size)

    def three_rings(self, part, node, local, across, tag):
        """The whole algorithm on ``part`` of the vector, its messages tagged ``tag``."""
        offsets = partition(part.size, len(node))
        blocks = [part[offsets[b]:offsets[b + 1]] for b in range(len(node))]
        scratch = np.empty(offsets[1], part.dtype)
        yield from ring_reduce_scatter(self, blocks, node, scratch, tag)
        mine = blocks[local]
        pieces = partition(mine.size, len(across))
        shards = [mine[pieces[b]:pieces[b + 1]] for b in range(len(across))]
        yield from ring_reduce_scatter(self, shards, across, scratch, tag)
        yield from ring_allgather(self, shards, across, tag)
        yield from ring_allgather(self, blocks, node, tag)

    def interleave(self, waiting: deque):
        """Run the chunks' programs ``IN_FLIGHT`` at a time, each to its next wait in turn,
        so that one chunk crosses between nodes while the next is reduced inside them."""
        active: list = []
        while waiting or active:
            while waiting and len(active) < IN_FLIGHT:
                active.append(waiting.popleft())
            done = []
            for chunk in active:
                try:
                    next(chunk)
                except StopIteration:
                    done.append(chunk)
            for chunk in done:
                active.remove(chunk)
            if active and not done:
                yield
