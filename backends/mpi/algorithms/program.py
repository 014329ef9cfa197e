"""The base of the custom MPI algorithms: a State whose algorithm is a generator.

An algorithm is written top to bottom as a generator method ``program``; every ``yield`` means
"waiting on messages or peers, poll me again".  ``start`` runs it to its first wait (posting
the first sends), ``step`` resumes it once and never blocks, so the same code serves the
blocking call (driven on the caller's thread) and the nonblocking one (driven by the engine).

Each operation takes its tag from ``comm.next_tag()`` in ``__init__``, i.e. in issue order,
which is the same on every rank; messages travel on the communicator's private duplicate, so
concurrent operations never match each other's messages.  An algorithm whose messages need
no tag of their own (``fixed_tag``: the direct reduce) takes none from the counter.
Messages carry raw bytes: every dtype (bfloat16, long double, ...) moves the same way and
only numpy interprets them.  Over a slow link between nodes an exchange sends a long block
as a stream of pieces (``between_nodes_piece``, core/pieces.py), all posted at once.
"""
from __future__ import annotations

import os
from typing import Iterator

import numpy as np
from mpi4py import MPI

from ....core.pieces import between_nodes_piece, chain_pieces
from ....core.reduction import reduce_in_rank_order
from ....engine.state import Action, State
from ..passthrough.mpi_errors import operation_error
from .node_layout import node_position
from .vector_copy import copy_vector

SPIN_POLLS = 50


class ProgramState(State):
    """A State running the generator ``program()``; subclasses write the algorithm there."""

    # Class defaults, set on the instance once they change: a blocking call never sets them.
    _program: Iterator[None] | None = None
    _finished = False
    _idle_polls = 0
    # False for algorithms that exchange no messages (shared memory): they take no tag and
    # no MPI communicator (every rank runs the same algorithms, so tags still agree).
    sends_messages = True
    # The tag of every operation of the algorithm, where the messages of its operations on
    # one communicator cannot be told apart by anything but their order: None, a tag per
    # operation from ``comm.next_tag()``.
    fixed_tag: int | None = None
    # The pieces a long message to or from another node goes in (None: whole), by the
    # link's speed (core/pieces.py): read once per operation, as its tags are taken.
    _piece: int | None = None

    def __init__(self, comm):
        self.comm = comm
        if self.sends_messages:
            self.mpi = comm.mpi_comm
            self.tag = comm.next_tag() if self.fixed_tag is None else self.fixed_tag
            if comm.node_count > 1:
                self._piece = between_nodes_piece()

    def program(self) -> Iterator[None]:
        raise NotImplementedError

    def start(self) -> None:
        self._program = self.program()
        self._finished = self._resume()

    def step(self) -> Action:
        if self._finished or self._resume():
            return Action.COMPLETE
        return Action.CONTINUE

    def drive(self) -> None:
        """Blocking calls: run the program to its end on the calling thread (what ``start``
        and ``step`` until COMPLETE do, without their per-call bookkeeping)."""
        try:
            for _ in self.program():
                pass
        except MPI.Exception as exc:   # everything raised derives from al.AluminumError
            raise operation_error(self.name, exc) from exc

    def _resume(self) -> bool:
        """Run the program to its next wait; True once it has returned."""
        try:
            next(self._program)
        except StopIteration:
            return True
        return False

    def idle(self) -> None:
        """Called while a wait is unsatisfied: spin a little, then give the core away.

        A peer usually answers within microseconds, and giving the core away costs a whole
        time slice on a busy machine, so the first ``SPIN_POLLS`` polls of a wait just spin.
        After that each poll calls ``sched_yield`` (which also releases the GIL): with more
        ranks than cores a spinning rank would delay the very peer it waits for, and in a
        process where other threads run Python it would hold the GIL from them.
        """
        self._idle_polls += 1
        if self._idle_polls > SPIN_POLLS:
            os.sched_yield()

    def progressed(self) -> None:
        """Called when a wait is over: the next wait spins first again."""
        self._idle_polls = 0

    # -- messages --------------------------------------------------------------------------

    def isend(self, block: np.ndarray, peer: int, tag: int | None = None) -> MPI.Request:
        return self.mpi.Isend(block.view(np.uint8), peer, self.tag if tag is None else tag)

    def irecv(self, block: np.ndarray, peer: int, tag: int | None = None) -> MPI.Request:
        return self.mpi.Irecv(block.view(np.uint8), peer, self.tag if tag is None else tag)

    def exchange(self, send: np.ndarray, dest: int, recv: np.ndarray, source: int,
                 tag: int | None = None):
        """Send ``send`` to ``dest`` while receiving ``recv`` from ``source``; wait for both.
        ``tag``: another of this operation's tags (parts of it in flight at once).  ``recv``
        must be as long as what ``source`` sends: a block going to or coming from another
        node may travel in pieces, cut alike on both sides from its length."""
        piece = self._piece
        if piece is None:
            requests = [self.irecv(recv, source, tag), self.isend(send, dest, tag)]
            yield from self.wait(requests)
            return
        tag = self.tag if tag is None else tag
        yield from self.wait_in_order(self._pieces(self.mpi.Irecv, recv, source, tag, piece) +
                                      self._pieces(self.mpi.Isend, send, dest, tag, piece))

    def _pieces(self, post, block: np.ndarray, peer: int, tag: int,
                piece: int) -> list[MPI.Request]:
        """``post`` (``Isend`` or ``Irecv``) of ``block``: at once within this rank's node,
        else in pieces of at most ``piece`` bytes (matched in order: MPI never lets
        messages of one sender and tag overtake each other)."""
        data = block.view(np.uint8)
        if data.size <= piece or peer in node_position(self.comm, self.comm.rank).node:
            return [post(data, peer, tag)]
        return [post(data[start:start + piece], peer, tag)
                for start in range(0, data.size, piece)]

    def wait(self, requests: list[MPI.Request]):
        """Yield until every request has completed."""
        while not MPI.Request.Testall(requests):
            self.idle()
            yield
        self.progressed()

    def wait_in_order(self, requests: list[MPI.Request]):
        """``wait`` for a list whose requests complete about in order (a message's pieces):
        each poll tests from the first one not yet seen complete, stopping at the first
        still pending, instead of testing them all."""
        done = 0
        while True:
            while requests[done].Test():
                done += 1
                if done == len(requests):
                    self.progressed()
                    return
            self.idle()
            yield


def result_buffer(sendbuf, recvbuf) -> np.ndarray:
    """``recvbuf``'s array holding this rank's contribution (copied in when out of place)."""
    if sendbuf is not recvbuf:
        copy_vector(recvbuf.array, sendbuf.array)
    return recvbuf.array


def partition(count: int, parts: int) -> list[int]:
    """Offsets of ``parts`` nearly equal blocks of ``count`` elements (``parts + 1`` values);
    the first ``count % parts`` blocks hold one element more, and blocks may be empty."""
    base, extra = divmod(count, parts)
    return [i * base + min(i, extra) for i in range(parts + 1)]


def rank_order_allreduce(state: ProgramState, result: np.ndarray):
    """Deterministic mode's allreduce, for the message-passing algorithms (``state`` has
    ``comm`` and ``op``; ``result`` holds this rank's contribution): each block of the
    vector goes to the rank that owns it, unreduced, in ``p - 1`` pairwise exchanges; the
    owner reduces the ``p`` copies in rank order, ``((x0 + x1) + x2) + ...``; the reduced
    blocks come back in ``p - 1`` more.  2(p−1)α + 2((p−1)/p)nβ, as the ring, and ``n``
    elements of scratch."""
    rank, size, op = state.comm.rank, state.comm.size, state.op
    offsets = partition(result.size, size)
    blocks = [result[offsets[b]:offsets[b + 1]] for b in range(size)]
    mine = blocks[rank]
    copies = np.empty((size, mine.size), result.dtype)
    copies[rank] = mine
    for s in range(1, size):
        dest, source = (rank + s) % size, (rank - s) % size
        yield from state.exchange(blocks[dest], dest, copies[source], source)
    reduce_in_rank_order(op, copies, out=mine)
    op.finish(mine, size)
    for s in range(1, size):
        dest, source = (rank + s) % size, (rank - s) % size
        yield from state.exchange(mine, dest, blocks[source], source)


def ring_reduce_scatter(state: ProgramState, blocks: list, ring: list[int],
                        scratch: np.ndarray, tag: int | None = None):
    """Round ``ring`` (ranks of ``state``'s communicator, this rank among them), leave the
    ring's reduction of ``blocks[i]`` in ``blocks[i]`` at the ``i``-th member: in step ``s``
    each member passes its running partial of block ``me - s - 1`` to the right and folds
    block ``me - s - 2`` arriving from the left into its own.  ``scratch`` holds the largest
    block.  Each block is reduced by one chain of members, so every member of the ring gets
    the same bits once the blocks are gathered."""
    size, me = len(ring), ring.index(state.comm.rank)
    right, left = ring[(me + 1) % size], ring[(me - 1) % size]
    for s in range(size - 1):
        sent, arriving = blocks[(me - s - 1) % size], blocks[(me - s - 2) % size]
        partial = scratch[:arriving.size]
        yield from state.exchange(sent, right, partial, left, tag)
        state.op.reduce_into(arriving, partial)


def ring_allgather(state: ProgramState, blocks: list, ring: list[int],
                   tag: int | None = None):
    """Round ``ring``, copy the ``i``-th member's ``blocks[i]`` to every member: in step
    ``s`` each member forwards block ``me - s`` to the right and receives block
    ``me - s - 1`` from the left, in place."""
    size, me = len(ring), ring.index(state.comm.rank)
    right, left = ring[(me + 1) % size], ring[(me - 1) % size]
    for s in range(size - 1):
        yield from state.exchange(blocks[(me - s) % size], right,
                                  blocks[(me - s - 1) % size], left, tag)


def chain_reduce(state: ProgramState, block: np.ndarray, chain: list[int],
                 scratch: np.ndarray, tag: int | None = None):
    """Reduce ``block`` along ``chain`` (ranks, this rank among them) into ``chain[0]``'s:
    each member folds the running partial arriving from the member after it into its own
    block, ``mine (op) theirs``, and passes the result to the member before it.  Each member
    sends its block's bytes once; long blocks go in pieces (core/pieces.py), so every link
    of the chain carries a piece at once.  ``scratch``: at least ``block.size`` elements."""
    me = chain.index(state.comm.rank)
    bounds = partition(block.size, chain_pieces(block.nbytes))
    pieces = [block[bounds[c]:bounds[c + 1]] for c in range(len(bounds) - 1)]
    receives = []
    if me + 1 < len(chain):                  # every piece's partial posted at once
        partials = [scratch[bounds[c]:bounds[c + 1]] for c in range(len(pieces))]
        receives = [state.irecv(partial, chain[me + 1], tag) for partial in partials]
    sends = []
    for c, piece in enumerate(pieces):
        if receives:
            yield from state.wait([receives[c]])
            state.op.reduce_into(piece, partials[c])
        if me > 0:
            sends.append(state.isend(piece, chain[me - 1], tag))
    yield from state.wait(sends)


def chain_bcast(state: ProgramState, block: np.ndarray, chain: list[int],
                tag: int | None = None):
    """Copy ``chain[0]``'s ``block`` to every member of ``chain``: each member receives it
    from the member before it and forwards it to the one after, in pieces (core/pieces.py),
    so each member receives the bytes once and every link carries a piece at once."""
    me = chain.index(state.comm.rank)
    bounds = partition(block.size, chain_pieces(block.nbytes))
    pieces = [block[bounds[c]:bounds[c + 1]] for c in range(len(bounds) - 1)]
    receives = [state.irecv(piece, chain[me - 1], tag) for piece in pieces] if me else []
    sends = []
    for c, piece in enumerate(pieces):
        if receives:
            yield from state.wait([receives[c]])
        if me + 1 < len(chain):
            sends.append(state.isend(piece, chain[me + 1], tag))
    yield from state.wait(sends)
