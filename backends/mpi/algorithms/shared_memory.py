"""Intra-node allreduce through an MPI-3 shared-memory window, pipelined in chunks.

Each chunk of the vector is cut into one slice per rank.  Per chunk ("round"), every rank
(1) copies the slices *other* ranks own into its staging slot, (2) reduces its own slice —
its private data (op) every peer's staged copy, written straight into its ``recvbuf`` —
and publishes the finished slice in the result slot, (3) copies the other ranks' finished
slices into its ``recvbuf``.  That is the fewest copies shared memory allows without reading
another process's private memory: ((p−1)/p)n bytes in, (1/p)n published, ((p−1)/p)n out.

Chunks of ``SharedWindow.CHUNK_BYTES`` keep the staging and result slots cache-resident
(they are reused every round, so only the user's buffers stream through DRAM), and with
``SharedWindow.SLOTS`` slots a rank may copy in chunk ``t + 1`` while peers still reduce
chunk ``t``: the three kinds of work run as a small software pipeline gated by per-rank
progress counters in the window, with no barriers.  Each slice is reduced by exactly one
rank and copied to the others, so every rank ends with identical bits.
"""
from __future__ import annotations

from ....errors import OperationError, UnsupportedError
from ....reduction import _UFUNCS
from .program import ProgramState, result_buffer
from .shared_window import COPIED_IN, COPIED_OUT, REDUCED, SharedWindow
from .vector_copy import copy_vector

_ALIGN_BYTES = 64              # slice boundaries on cache lines: owners never share a line
# Every rank reduces the whole vector itself while nbytes * (p - 1) stays below this: the
# redundant arithmetic grows with p, the pipeline's second synchronisation does not.
SMALL_BYTES = 512 << 10
_CELL_BYTES = 4096             # small rounds' staging offsets are multiples of this


class SharedMemoryAllreduce(ProgramState):
    """Allreduce for communicators whose ranks all share one node.

    Raises ``UnsupportedError`` when they do not (``comm.local_size != comm.size``): shared
    memory cannot reach another node, and a silent fallback would hide a wrong choice of
    algorithm; ``ring`` and ``rabenseifner`` work everywhere.  The first call on a
    communicator allocates its window (a collective over the node).
    """

    name = "allreduce/shared_memory"

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        if comm.local_size != comm.size:
            raise UnsupportedError(
                f"algo: shared_memory needs every rank on one node; this communicator has "
                f"{comm.size} ranks, {comm.local_size} of them on this node (use ring, "
                f"rabenseifner or mpi_passthrough)")
        super().__init__(comm)
        self.sendbuf, self.recvbuf, self.op = sendbuf, recvbuf, op
        self.window = None
        if comm.size > 1 and recvbuf.count > 0:
            self.window = SharedWindow.of(comm)
            self.chunk = self.window.chunk_bytes // recvbuf.dtype.itemsize
            rounds = -(-recvbuf.count // self.chunk)
            self.ticket, self.first_round = self.window.reserve(rounds)
            self.end_round = self.first_round + rounds
            self.small = rounds == 1 and recvbuf.nbytes * (comm.size - 1) <= SMALL_BYTES
            if self.small:
                # Successive small rounds stage at different offsets of their slot: writing
                # lines a peer read lately (still in its cache) costs several times more.
                cell = -(-recvbuf.nbytes // _CELL_BYTES) * _CELL_BYTES
                cells = self.window.chunk_bytes // cell
                self.offset = (self.first_round // self.window.slots) % cells * cell \
                    // recvbuf.dtype.itemsize

    def program(self):
        if self.window is None:                  # one rank, or nothing to reduce
            self.op.finish(result_buffer(self.sendbuf, self.recvbuf), self.comm.size)
            return
        window = self.window
        while window.serving != self.ticket:     # one operation at a time on the window
            self.idle()
            yield
        self.progressed()
        if window.failure is not None:
            raise OperationError("shared_memory: an earlier operation on this communicator "
                                   "failed mid-way; its shared window is unusable") \
                from window.failure
        try:
            if self.small:
                yield from self.every_rank_reduces()
            else:
                yield from self.pipeline()
        except BaseException as exc:
            window.failure = exc
            raise
        finally:
            window.serving += 1

    def every_rank_reduces(self):
        """Small vectors, one round: every rank stages its whole vector, then reduces all of
        them itself in rank order.  One synchronisation instead of the pipeline's two, for
        a little redundant arithmetic; identical inputs and order give identical bits."""
        window, round_ = self.window, self.first_round
        slot, count = round_ % window.slots, self.recvbuf.count
        staging = [slots[slot][self.offset:self.offset + count]
                   for slots in window.views(self.recvbuf.dtype)[0]]
        while not window.reached(REDUCED, round_ - window.slots):
            self.idle()
            yield
        copy_vector(staging[window.rank], self.sendbuf.array)
        window.publish(round_, COPIED_IN)
        self.progressed()
        while not window.reached(COPIED_IN, round_):
            self.idle()
            yield
        result = self.recvbuf.array
        _UFUNCS[self.op](staging[0], staging[1], out=result)
        for staged in staging[2:]:
            self.op.reduce_into(result, staged)
        window.publish(round_, REDUCED, COPIED_OUT)   # done with staging; no result slot used
        self.op.finish(result, window.size)

    def pipeline(self):
        """Run each round's copy-in, reduction and copy-out as soon as its inputs are ready.

        Gates: copying into a staging slot waits until every peer has reduced what the slot
        held ``slots`` rounds ago; writing a result slot waits until every rank (this one
        too) has copied out what it held ``slots`` rounds ago.
        """
        window, slots, end = self.window, self.window.slots, self.end_round
        self.staging, self.results = window.views(self.recvbuf.dtype)
        self.full_slice = self.slice_of(self.chunk)
        self.last_slice = self.slice_of(self.recvbuf.count - (end - 1 - self.first_round)
                                        * self.chunk)
        copied_in = reduced = copied_out = self.first_round
        while copied_out < end:
            if copied_in < end and window.reached(REDUCED, copied_in - slots):
                self.copy_in(copied_in)
                copied_in += 1
            elif (reduced < copied_in and reduced - slots < copied_out
                  and window.reached(COPIED_IN, reduced)
                  and window.reached(COPIED_OUT, reduced - slots)):
                self.reduce(reduced)
                reduced += 1
            elif copied_out < reduced and window.reached(REDUCED, copied_out):
                self.copy_out(copied_out)
                copied_out += 1
            else:
                self.idle()
                yield
                continue
            self.progressed()

    # -- one round's three kinds of work ---------------------------------------------------

    def copy_in(self, round_: int) -> None:
        """Stage the slices of this chunk that other ranks reduce."""
        start, stop, lo, hi = self.bounds(round_)
        staged = self.staging[self.window.rank][round_ % self.window.slots]
        send = self.sendbuf.array
        copy_vector(staged[:lo], send[start:start + lo])
        copy_vector(staged[hi:stop - start], send[start + hi:stop])
        self.window.publish(round_, COPIED_IN)

    def reduce(self, round_: int) -> None:
        """Reduce this rank's slice of the chunk into ``recvbuf``; publish the result."""
        start, stop, lo, hi = self.bounds(round_)
        window, slot = self.window, round_ % self.window.slots
        mine = self.recvbuf.array[start + lo:start + hi]
        ufunc, others = _UFUNCS[self.op], self.sendbuf.array[start + lo:start + hi]
        for peer in range(window.size):
            if peer != window.rank:
                ufunc(others, self.staging[peer][slot][lo:hi], out=mine)
                others = mine
        self.op.finish(mine, window.size)
        copy_vector(self.results[slot][lo:hi], mine)
        window.publish(round_, REDUCED)

    def copy_out(self, round_: int) -> None:
        """Copy the other ranks' finished slices of the chunk into ``recvbuf``."""
        start, stop, lo, hi = self.bounds(round_)
        result = self.results[round_ % self.window.slots]
        recv = self.recvbuf.array
        copy_vector(recv[start:start + lo], result[:lo])
        copy_vector(recv[start + hi:stop], result[hi:stop - start])
        self.window.publish(round_, COPIED_OUT)

    def bounds(self, round_: int) -> tuple[int, int, int, int]:
        """The chunk ``[start, stop)`` of round ``round_`` and this rank's slice ``[lo, hi)``
        within it (every chunk but the last has the same slices)."""
        start = (round_ - self.first_round) * self.chunk
        if round_ == self.end_round - 1:
            return (start, self.recvbuf.count) + self.last_slice
        return (start, start + self.chunk) + self.full_slice

    def slice_of(self, length: int) -> tuple[int, int]:
        """This rank's ``[lo, hi)`` of a chunk of ``length`` elements, cut on cache lines."""
        align = max(1, _ALIGN_BYTES // self.recvbuf.dtype.itemsize)
        units, size, rank = -(-length // align), self.comm.size, self.comm.rank
        base, extra = divmod(units, size)
        return (min(length, align * (rank * base + min(rank, extra))),
                min(length, align * ((rank + 1) * base + min(rank + 1, extra))))
