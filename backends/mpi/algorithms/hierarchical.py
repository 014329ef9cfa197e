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

from ....core.pieces import pipeline_chunks
from ....core.reduction import sums_in_rank_order
from .hierarchical_shared import node_barrier, reduce_my_block, shared_arrays
from .node_layout import node_position, require_uniform_nodes
from .program import (ProgramState, partition, rank_order_allreduce, result_buffer,
                      ring_allgather, ring_reduce_scatter)
from .shared_buffers import SharedBuffers
from .vector_copy import copy_vector

# Chunks in flight at once: one crossing between nodes while the next is reduced in them.
# Each chunk already carries about a millisecond of the link's time (core/pieces.py); with
# more in flight, their messages leave each host at once and share its link unevenly, and
# the allreduce fell behind MPI's own (docs/hosts.md has the runs).
IN_FLIGHT = 2


class HierarchicalAllreduce(ProgramState):
    """Allreduce in three rings: over the node, across nodes, over the node again.

    1. Reduce-scatter round the ranks of this node: local rank ``r`` ends with the node's sum
       of block ``r`` of ``L`` blocks.
    2. Ring allreduce of block ``r`` round the ranks that have local rank ``r`` on every
       node (one per node), so block ``r`` holds the sum over all ranks.
    3. Allgather of the ``L`` blocks round the node.

    Across nodes the vector is cut into chunks (``pipeline_chunks``: each what the link
    carries in about a millisecond, by the tuning table's ``inter_model``), up to
    ``IN_FLIGHT`` run at a time, so the link carries chunks while the ranks reduce others
    inside the node.

    Every element is reduced by exactly one rank per level and then copied, so every rank
    ends with the same bits; the order of the sum is fixed (node ring, then node order), the
    same for the blocking and the nonblocking call; in deterministic mode it is rank order,
    as in every algorithm (and no longer two-level).  Messages go between the ranks of this
    communicator (no sub-communicators): the ranks of a node from ``comm.nodes``.

    Where every rank of a node passes ``al.shared_empty`` arrays (a ``GradientBucket`` on
    a multi-node communicator, say), the node's phases read and write the node's shared
    segments directly (hierarchical_shared.py), with the same bits; private buffers on a
    communicator that has shared ones pay one small exchange inside the node per call to
    find that out.

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
        if self.rank_order:                # deterministic mode: one order for every algorithm
            yield from rank_order_allreduce(self, result_buffer(self.sendbuf, self.recvbuf))
            return
        node, local, across = node_position(self.comm, self.comm.rank)
        shared = None
        if len(node) > 1 and SharedBuffers.find(self.comm) is not None:
            shared = yield from shared_arrays(self, node, self.sendbuf.array,
                                              self.recvbuf.array)
        # Out of place, each chunk's contribution is copied into ``result`` as the chunk
        # starts (a copy of the whole vector first would hold the link idle meanwhile);
        # with shared arrays, ``result`` is filled block by block from them.
        result = self.recvbuf.array
        source = self.sendbuf.array if shared is None and self.sendbuf is not self.recvbuf \
            else None
        bounds = partition(result.size, len(self.tags))
        yield from self.interleave(deque(
            self.three_rings(result, bounds[c], bounds[c + 1], node, local, across, tag,
                             shared, source)
            for c, tag in enumerate(self.tags)))
        if shared is not None:             # nobody overwrites a buffer another still reads
            yield from node_barrier(self, node)
        self.op.finish(result, self.comm.size)

    def three_rings(self, result, low, high, node, local, across, tag, shared, source):
        """The whole algorithm on ``result[low:high]``, its messages tagged ``tag``;
        ``shared``: every local rank's (send, recv) arrays, read and written directly
        inside the node instead of the node's rings (None: private buffers); ``source``:
        the send array to copy this chunk's contribution from first (None: in place)."""
        part = result[low:high]
        if source is not None:
            copy_vector(part, source[low:high])
        offsets = partition(part.size, len(node))
        blocks = [part[offsets[b]:offsets[b + 1]] for b in range(len(node))]
        scratch = np.empty(offsets[1], part.dtype)
        if shared is None:
            yield from ring_reduce_scatter(self, blocks, node, scratch, tag)
        else:
            reduce_my_block(self.op, [send[low:high] for send in shared[0]],
                            slice(offsets[local], offsets[local + 1]), local, blocks[local],
                            scratch)
        mine = blocks[local]
        pieces = partition(mine.size, len(across))
        shards = [mine[pieces[b]:pieces[b + 1]] for b in range(len(across))]
        yield from ring_reduce_scatter(self, shards, across, scratch, tag)
        yield from ring_allgather(self, shards, across, tag)
        if shared is None:
            yield from ring_allgather(self, blocks, node, tag)
            return
        yield from node_barrier(self, node, tag)        # every block of this chunk is final
        for b, theirs in enumerate(shared[1]):
            if b != local:
                copy_vector(blocks[b], theirs[low:high][offsets[b]:offsets[b + 1]])

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
