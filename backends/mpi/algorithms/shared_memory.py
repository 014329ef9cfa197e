"""Intra-node allreduce through an MPI-3 shared-memory window, pipelined in chunks.

Each chunk of the vector is cut into one slice per rank, rank ``o`` owning slice ``o``.  Per
chunk ("round") every rank
 1. copies in: stages the slices other ranks own into its own staging slot;
 2. reduces: adds its private slice into the copy of that slice staged by its right-hand
    neighbour ``o + 1``, in place in shared memory, then adds the other ranks' staged
    copies, finishes it (AVG) and copies the result into its ``recvbuf``;
 3. copies out: reads every other owner's finished slice (staged at ``o + 1``) into its
    ``recvbuf``.
Each element crosses between processes twice, once in and once out, which is the least shared
memory allows without reading another process's private memory.  Reducing *in place* in the
stager's slot matters on these machines: writing cache lines another core has just *read*
costs up to four times a local write, while taking over lines another core has just
*written* costs about a local write (512 KiB on an idle machine: 63-119 µs against 26-45 µs,
depending on where the host puts the two vCPUs).  An earlier version that reduced into
``recvbuf`` and published the result in a separate slot paid the expensive kind twice per
round and ran up to 1.5x slower at 1-4 MiB.

Chunks of ``SharedWindow.CHUNK_BYTES`` keep the staging slots cache-resident (they are reused
every round, so only the user's buffers stream through DRAM); with ``SharedWindow.SLOTS``
slots a rank may copy in chunk ``t + 1`` while peers still reduce chunk ``t``: the three kinds
of work run as a small software pipeline gated by per-rank progress counters in the window,
never by barriers.  Each slice is reduced by exactly one rank and copied to the others, so
every rank ends with identical bits.

Small vectors take a one-round shortcut with a single synchronisation: every rank stages its
whole vector and reduces all of them itself, in rank order (same inputs, same order, same
bits), which beats the pipeline's second synchronisation while the redundant arithmetic is
cheap.

In deterministic mode (``al.set_deterministic``) the pipeline's and the zero-copy path's
owners reduce their slices in rank order too, through a scratch slice (one more copy of the
slice), so every path gives the rank-order bits of the other algorithms.

Buffers from ``al.shared_empty`` (shared_buffers.py) skip the staging: when every rank
announces that its buffers lie in shared memory, each rank reduces its slice straight out of
every rank's ``sendbuf`` and writes the result straight into every rank's ``recvbuf``, in
chunks of ``ZERO_COPY_CHUNK`` bytes, so that a chunk is still in cache when it is copied out
(256 KiB, the size a first prototype used; other sizes were not compared).  Each element is then
read once and written once per rank, with two synchronisations per operation (all announced;
all written); in place is safe because nobody else reads or writes the slice a rank owns.
A rank's share of such an operation is built once per placement (every rank's announced place,
the dtype and the op) as a list of numpy calls with their arguments bound, since training
loops reduce the same buffers step after step: rebuilding it on every call took about
6-10 µs of a 64 KiB call's 40 µs on 2 ranks here.
When any rank's buffers are private, all of them take the staged path above.

A single-copy design (each rank reading its peers' buffers directly with
``process_vm_readv``) was measured and rejected: the kernel copies with ``rep movsb``,
2.5-10x slower here than numpy's vectorised loops (128 KiB: 92 µs vs 9 µs; 512 KiB: 66 µs vs
26 µs), and it needs ptrace permission between the ranks.  A 2-rank version that reads the
peer's half with it 256 KiB at a time, reduces it in cache, then reads the peer's finished
half (``floor_cma`` in bench/allreduce_floors.py) took 1.11-1.57x, 1.11-1.18x, 0.97-1.19x and
0.79-1.22x mpi4py at 256 KiB, 1, 4 and 16 MiB over three runs, against this staged path's
0.95-1.30x, 0.69-0.98x, 0.80-0.87x and 0.80-1.34x in the same runs: no better.
"""
from __future__ import annotations

import functools

import numpy as np

from ....core.errors import OperationError, UnsupportedError
from ....core.reduction import reduce_in_rank_order, sums_in_rank_order
from .program import ProgramState
from .shared_buffers import NOT_SHARED, SharedBuffers
from .shared_window import ANNOUNCED, COPIED_IN, COPIED_OUT, REDUCED, SharedWindow
from .vector_copy import copy_vector, vector_copier

_ALIGN_BYTES = 64              # slice boundaries on cache lines: owners never share a line
# Every rank reduces the whole vector itself while nbytes * (p - 1) stays below this: the
# redundant arithmetic grows with p, the pipeline's second synchronisation does not.
SMALL_BYTES = 256 << 10
ZERO_COPY_CHUNK = 256 << 10    # bytes reduced, then copied to the peers, at a time


class _CountMismatch(Exception):
    """The ranks' shared buffers differ in size (every rank saw it; the window is intact)."""


class SharedMemoryAllreduce(ProgramState):
    """Allreduce for communicators whose ranks all share one node.

    Raises ``UnsupportedError`` when they do not (``comm.local_size != comm.size``): shared
    memory cannot reach another node, and a silent fallback would hide a wrong choice of
    algorithm; ``ring`` and ``rabenseifner`` work everywhere.  The first call on a
    communicator allocates its window (a collective over the node).
    """

    name = "allreduce/shared_memory"
    single_node = True   # the selector falls back to the default on multi-node communicators
    sends_messages = False

    def __init__(self, comm, stream, sendbuf, recvbuf, op):
        send, recv = sendbuf.array, recvbuf.array   # flat arrays; the same one in place
        if comm.local_size != comm.size:
            raise UnsupportedError(
                f"algo: shared_memory needs every rank on one node; this communicator has "
                f"{comm.size} ranks, {comm.local_size} of them on this node (use ring, "
                f"rabenseifner or mpi_passthrough)")
        ProgramState.__init__(self, comm)
        self.send, self.recv, self.op = send, recv, op
        self.rank_order = sums_in_rank_order(op, recv.dtype, comm.size)
        self.window = None
        count = recv.size
        if comm.size > 1 and count > 0:
            self.window = window = SharedWindow.of(comm, self.describe(comm))
            self.chunk = window.chunk_bytes // recv.itemsize
            rounds = -(-count // self.chunk)
            self.ticket, self.first_round = window.reserve(rounds)
            self.end_round = self.first_round + rounds
            self.small = rounds == 1 and recv.nbytes * (comm.size - 1) <= SMALL_BYTES
            # None: the communicator has no shared buffers (nothing to announce)
            self.registry = registry = SharedBuffers.find(comm)
            self.place = None if registry is None else registry.place(send, recv)

    def program(self):
        if self.window is None:                  # one rank, or nothing to reduce
            if self.send is not self.recv:
                copy_vector(self.recv, self.send)
            self.op.finish(self.recv, self.comm.size)
            return
        window = self.window
        while window.serving != self.ticket:     # one operation at a time on the window
            self.idle()
            yield
        self.progressed()
        try:
            plan = None if self.place is None else (yield from self.shared_buffers())
            if plan is not None:
                yield from self.zero_copy(plan)
            elif self.small:
                yield from self.every_rank_reduces()
            else:
                yield from self.pipeline()
        except _CountMismatch as exc:
            raise OperationError(f"allreduce: {exc}") from None
        except BaseException:
            window.fail(self.end_round - 1)   # peers finish, the window stays consistent
            raise
        finally:
            window.serving += 1
        failed = window.failed_peer(self.first_round)
        if failed is not None:
            raise OperationError(f"shared_memory: rank {failed} of the node failed during this "
                                 f"allreduce; this rank's result is undefined (the "
                                 f"communicator stays usable)")

    def describe(self, comm) -> str:
        """``"allreduce/shared_memory (collective #3 on this communicator, rank 0 of 2)"``:
        this operation in a message, numbered as the watchdog counts arrivals (the plan
        counted this one before building the state; the engine's request number comes
        later)."""
        arrivals = comm.arrivals
        number = "" if arrivals is None else f"collective #{arrivals.count} on this " \
                                              "communicator, "
        return f"{self.name} ({number}rank {comm.rank} of {comm.size})"

    def shared_buffers(self):
        """Announce where this rank's buffers lie; when every rank's are shared buffers,
        return this rank's zero-copy plan (``zero_copy_plan``), None when any rank's are
        private.  Plans are remembered by every rank's announced place, dtype and op."""
        window, round_ = self.window, self.first_round
        window.announce(round_, self.place)
        if self.place is NOT_SHARED:
            return None
        while not window.reached(ANNOUNCED, round_):
            self.idle()
            yield
        self.progressed()
        registry = self.registry
        key = (window.announced(), self.recv.dtype, self.op, self.rank_order)
        plan = registry.plans.get(key)
        if plan is not None:
            return plan
        places = window.places(key[0])
        if any(place[0] < 0 for place in places):
            return None
        nbytes = self.recv.nbytes
        wrong = [(q, place[4]) for q, place in enumerate(places) if place[4] != nbytes]
        if wrong:       # every rank sees it; none leaves (announcing anew) before all read
            yield from self.all_done()
            raise _CountMismatch(
                f"the ranks' buffers differ in size: {nbytes} bytes on rank {window.rank}, "
                + ", ".join(f"{b} on rank {q}" for q, b in wrong))
        plan = self.zero_copy_plan(*registry.arrays(places, self.recv.dtype))
        registry.remember(key, plan)
        return plan

    def zero_copy_plan(self, sends, recvs) -> list:
        """This rank's share of a zero-copy allreduce, as calls to make in order: reduce its
        slice out of every rank's sendbuf into its recvbuf and copy the result into every
        other rank's recvbuf, a cache-sized chunk at a time."""
        rank, size, op = self.window.rank, self.window.size, self.op
        ufunc, finishes = op.ufunc, op.finishes(size)
        cuts = self.cuts(self.recv.size)
        step = max(1, ZERO_COPY_CHUNK // self.recv.itemsize)
        plan = []
        if self.rank_order:
            return self.rank_order_plan(sends, recvs, cuts[rank], cuts[rank + 1], step)
        for start in range(cuts[rank], cuts[rank + 1], step):
            stop = min(cuts[rank + 1], start + step)
            result = recvs[rank][start:stop]
            inputs = [sends[(rank + peer) % size][start:stop] for peer in range(size)]
            plan.append(functools.partial(ufunc, inputs[0], inputs[1], out=result))
            plan.extend(functools.partial(ufunc, result, other, out=result)
                        for other in inputs[2:])
            if finishes:
                plan.append(functools.partial(op.finish, result, size))
            plan.extend(vector_copier(recvs[(rank + peer) % size][start:stop], result)
                        for peer in range(1, size))
        return plan

    def rank_order_plan(self, sends, recvs, first: int, end: int, step: int) -> list:
        """``zero_copy_plan`` in deterministic mode: each chunk reduced in rank order into
        scratch (in place, this rank's own input is a later operand than the result), then
        copied into every rank's recvbuf."""
        size, op = self.window.size, self.op
        scratch = np.empty(min(step, end - first), self.recv.dtype)
        plan = []
        for start in range(first, end, step):
            stop = min(end, start + step)
            result = scratch[:stop - start]
            plan.append(functools.partial(reduce_in_rank_order, op,
                                          [sends[q][start:stop] for q in range(size)],
                                          out=result))
            if op.finishes(size):
                plan.append(functools.partial(op.finish, result, size))
            plan.extend(vector_copier(recvs[q][start:stop], result) for q in range(size))
        return plan

    def zero_copy(self, plan):
        """Make this rank's zero-copy calls, then wait until every rank has made its own."""
        for call in plan:
            call()
        yield from self.all_done()

    def all_done(self):
        """Mark every round of this operation done, then wait until every rank has."""
        window, last = self.window, self.end_round - 1
        window.publish(last, COPIED_IN, REDUCED, COPIED_OUT)
        while not window.reached(COPIED_OUT, last):
            self.idle()
            yield

    def every_rank_reduces(self):
        """Small vectors, one round: every rank stages its whole vector, then reduces all of
        them itself in rank order."""
        window, round_, size = self.window, self.first_round, self.window.size
        staged = window.cells(round_, self.recv.dtype, self.recv.size)
        while not window.reached(COPIED_OUT, round_ - window.slots):
            self.idle()
            yield
        copy_vector(staged[window.rank], self.send)
        window.publish(round_, COPIED_IN)
        self.progressed()
        while not window.reached(COPIED_IN, round_):
            self.idle()
            yield
        result = self.recv
        self.op.ufunc(staged[0], staged[1], out=result)
        for other in staged[2:size]:
            self.op.reduce_into(result, other)
        window.publish(round_, REDUCED, COPIED_OUT)   # done reading every slot
        self.op.finish(result, size)

    def pipeline(self):
        """Run each round's copy-in, reduction and copy-out as soon as its inputs are ready.

        Gates, with ``S`` slots: staging round ``t`` overwrites what the slot held in round
        ``t - S``, so it waits until every rank (this one too) has copied that out; reducing
        round ``t`` needs every peer's copy-in of ``t``; copying out needs every peer's
        reduction of ``t``.
        """
        window, slots, end = self.window, self.window.slots, self.end_round
        self.staging = window.staging(self.recv.dtype)
        if self.rank_order:
            self.scratch = np.empty(self.chunk, self.recv.dtype)
        last = self.recv.size - (end - 1 - self.first_round) * self.chunk
        self.full_cuts, self.last_cuts = self.cuts(self.chunk), self.cuts(last)
        copied_in = reduced = copied_out = self.first_round
        while copied_out < end:
            if (copied_in < end and copied_in - slots < copied_out
                    and window.reached(COPIED_OUT, copied_in - slots)):
                self.copy_in(copied_in)
                copied_in += 1
            elif reduced < copied_in and window.reached(COPIED_IN, reduced):
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
        """Stage the slices of this chunk that other ranks own."""
        start, stop, cuts = self.chunk_of(round_)
        rank = self.window.rank
        lo, hi = cuts[rank], cuts[rank + 1]
        staged = self.staging[rank][round_ % self.window.slots]
        send = self.send
        copy_vector(staged[:lo], send[start:start + lo])
        copy_vector(staged[hi:stop - start], send[start + hi:stop])
        self.window.publish(round_, COPIED_IN)

    def reduce(self, round_: int) -> None:
        """Reduce this rank's slice in place in its right-hand neighbour's staging slot, then
        take the finished slice into ``recvbuf``."""
        start, _, cuts = self.chunk_of(round_)
        window, slot = self.window, round_ % self.window.slots
        rank, size = window.rank, window.size
        lo, hi = cuts[rank], cuts[rank + 1]
        result = self.staging[(rank + 1) % size][slot][lo:hi]
        if self.rank_order:   # deterministic mode: through scratch (result is operand rank+1)
            operands = [self.send[start + lo:start + hi] if q == rank else
                        self.staging[q][slot][lo:hi] for q in range(size)]
            ordered = self.scratch[:hi - lo]
            reduce_in_rank_order(self.op, operands, out=ordered)
            self.op.finish(ordered, size)
            copy_vector(result, ordered)
        else:
            self.op.ufunc(self.send[start + lo:start + hi], result, out=result)
            for peer in range(2, size):
                self.op.reduce_into(result, self.staging[(rank + peer) % size][slot][lo:hi])
            self.op.finish(result, size)
        window.publish(round_, REDUCED)
        copy_vector(self.recv[start + lo:start + hi], result)

    def copy_out(self, round_: int) -> None:
        """Copy every other owner's finished slice of the chunk into ``recvbuf``."""
        start, _, cuts = self.chunk_of(round_)
        window, slot = self.window, round_ % self.window.slots
        rank, size = window.rank, window.size
        recv = self.recv
        for owner in range(size):
            if owner != rank:
                lo, hi = cuts[owner], cuts[owner + 1]
                copy_vector(recv[start + lo:start + hi],
                            self.staging[(owner + 1) % size][slot][lo:hi])
        window.publish(round_, COPIED_OUT)

    def chunk_of(self, round_: int) -> tuple[int, int, list[int]]:
        """Round ``round_``'s chunk ``[start, stop)`` and its owners' cut points within it."""
        start = (round_ - self.first_round) * self.chunk
        if round_ == self.end_round - 1:
            return start, self.recv.size, self.last_cuts
        return start, start + self.chunk, self.full_cuts

    def cuts(self, length: int) -> tuple[int, ...]:
        """``p + 1`` cut points splitting ``length`` elements into owners' slices on
        cache-line boundaries."""
        return _cuts(length, max(1, _ALIGN_BYTES // self.recv.itemsize), self.window.size)


@functools.lru_cache(maxsize=256)
def _cuts(length: int, align: int, size: int) -> tuple[int, ...]:
    base, extra = divmod(-(-length // align), size)
    return tuple(min(length, align * (o * base + min(o, extra))) for o in range(size + 1))
