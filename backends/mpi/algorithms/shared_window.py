"""The shared-memory window of one communicator: staging slots and progress counters.

Allocated once per communicator (``MPI.Win.Allocate_shared`` on its node-local communicator,
a collective, on the first ``shared_memory`` operation) and kept by ``comm.scratch``, so
``comm.free()`` releases it.  Layout (bytes), ``S`` slots of ``chunk`` bytes:

    flags    one 128-byte line per rank: its progress counters (no false sharing)
    places   ``PLACE_FIELDS`` integers per rank, together: where its buffers of the current
             operation lie in shared memory, if they do (rewritten only when they change, so
             every rank reads all of them as one ``bytes`` key to its cached plans)
    staging  per rank, S slots: the parts of a chunk of its vector that other ranks reduce

A rank whose part of an operation fails (``fail``) marks it FAILED and publishes every counter
of its rounds, so its peers finish the operation (and raise, seeing the mark) instead of
waiting forever, and the window stays usable for the next operation.

Synchronisation is by counters, never by barriers: each rank publishes, per kind of work, the
last *round* (one chunk of one operation; numbered across operations, identically on every
rank) it has finished, and others spin until a counter reaches the round they need.
Publishing issues ``MPI.Win.Sync`` (a memory barrier) before the store, and a reader issues it
after seeing the counter, so data written before a counter is visible to whoever sees it.
"""
from __future__ import annotations

import itertools

import numpy as np
from mpi4py import MPI

from ....core.errors import OperationError, TimeoutError
from .. import rendezvous

LINE = 16                      # int64 counters per rank: one 128-byte line each
COPIED_IN, REDUCED, COPIED_OUT, ANNOUNCED, FAILED = 0, 1, 2, 3, 4
PLACE_FIELDS = 5               # integers in a rank's announced place
_PAGE = 4096
_CACHED_CELLS = 4096
_CELL_BYTES = 4096             # one-round operations' staging offsets are multiples of this


class SharedWindow:
    """Shared staging memory and progress counters for the node-local ranks of a communicator.

    Operations on one window run one at a time, in issue order: each takes a ``ticket`` (and
    its rounds) when it is built, and may start once ``serving`` reaches its ticket.
    """

    KEY = "shared_memory_window"
    CHUNK_BYTES = 1 << 20
    SLOTS = 2

    @classmethod
    def of(cls, comm, needed_by: str = "shared_memory") -> "SharedWindow":
        """The communicator's window, allocated on first use (collective over the node,
        bounded by ``AL_TIMEOUT``: a rank that never comes makes the others raise
        ``al.TimeoutError`` naming the operation that needed it (``needed_by``, e.g.
        ``"allreduce/shared_memory (collective #3 on this communicator, rank 0 of 2)"``)
        and the ranks that never came, and the communicator's shared_memory is then
        unusable: later uses raise ``OperationError`` at once, since its ranks are out of
        step)."""
        found = comm.scratch(cls.KEY)
        if found is None:
            try:
                found = comm.scratch(cls.KEY, lambda: cls(comm.local_comm, missing=_missing(comm),
                                                          needed_by=needed_by))
            except TimeoutError as exc:
                comm.scratch(cls.KEY, lambda: exc)
                raise
        if isinstance(found, TimeoutError):
            raise OperationError(f"{needed_by}: allocating this communicator's shared window "
                                 "timed out earlier; shared_memory cannot be used on it "
                                 "(use another algorithm or a new communicator)") from found
        return found

    def __init__(self, local: MPI.Comm, chunk_bytes: int = CHUNK_BYTES, slots: int = SLOTS,
                 missing=None, needed_by: str = "shared_memory"):
        self.rank, self.size = local.Get_rank(), local.Get_size()
        rendezvous.enter(local, f"{needed_by}: allocating the communicator's shared window "
                                "(MPI_Win_allocate_shared, on its first shared_memory use)",
                         missing)
        self.chunk_bytes, self.slots = chunk_bytes, slots
        lines = self.size * LINE * 8
        control = -(-(lines + self.size * PLACE_FIELDS * 8) // _PAGE) * _PAGE
        total = control + self.size * slots * chunk_bytes
        self._win = MPI.Win.Allocate_shared(total if self.rank == 0 else 0, 1, comm=local)
        memory, _ = self._win.Shared_query(0)
        self._win.Lock_all(MPI.MODE_NOCHECK)
        self.flags = memoryview(memory)[:lines].cast("q")
        self._places = memoryview(memory)[lines:lines + self.size * PLACE_FIELDS * 8]
        at = self.rank * PLACE_FIELDS * 8
        self._my_place = self._places[at:at + PLACE_FIELDS * 8].cast("q")
        data = np.frombuffer(memory, np.uint8, offset=control)
        self._staging = [[data[(q * slots + s) * chunk_bytes:(q * slots + s + 1) * chunk_bytes]
                          for s in range(slots)] for q in range(self.size)]
        self._typed: dict[np.dtype, list] = {}
        self._cells: dict = {}
        mine = self.rank * LINE
        self.flags[mine:mine + LINE] = memoryview(bytes(LINE * 8)).cast("q")
        for field in range(PLACE_FIELDS):
            self._my_place[field] = 0
        self._win.Sync()
        local.Barrier()
        self._peers = [q * LINE for q in range(self.size) if q != self.rank]
        self._tickets = itertools.count()
        self._rounds = 0
        self.serving = 0
        self._announced: tuple[int, ...] = ()

    def reserve(self, rounds: int) -> tuple[int, int]:
        """A ticket and the first of ``rounds`` consecutive round numbers, in issue order."""
        first = self._rounds + 1
        self._rounds += rounds
        return next(self._tickets), first

    def staging(self, dtype: np.dtype) -> list[list[np.ndarray]]:
        """``staging[rank][slot]``: each rank's slots as arrays of ``dtype``."""
        found = self._typed.get(dtype)
        if found is None:
            found = self._typed[dtype] = [[s.view(dtype) for s in slots]
                                          for slots in self._staging]
        return found

    def cells(self, round_: int, dtype: np.dtype, count: int) -> list[np.ndarray]:
        """Every rank's staging cell of ``count`` elements of ``dtype`` for a one-round
        operation ``round_``: in its slot for that round, at an offset that moves on from round
        to round, since writing lines a peer read lately (still in its cache) costs several
        times more than writing others.  Remembered: such rounds cycle through a few dozen."""
        cell = -(-count * dtype.itemsize // _CELL_BYTES) * _CELL_BYTES
        slot = round_ % self.slots
        offset = (round_ // self.slots) % (self.chunk_bytes // cell) * cell // dtype.itemsize
        key = (slot, offset, dtype, count)
        found = self._cells.get(key)
        if found is None:
            if len(self._cells) >= _CACHED_CELLS:
                self._cells.clear()
            found = self._cells[key] = [slots[slot][offset:offset + count]
                                        for slots in self.staging(dtype)]
        return found

    def publish(self, round_: int, *kinds: int) -> None:
        """Tell the other ranks this rank has finished ``kinds`` of work for ``round_``."""
        self._win.Sync()
        for kind in kinds:
            self.flags[self.rank * LINE + kind] = round_

    def announce(self, round_: int, place: tuple[int, ...]) -> None:
        """Publish ``place`` (``PLACE_FIELDS`` integers) as this rank's, for ``round_``."""
        if place != self._announced:      # (a training loop announces the same place)
            for field, value in enumerate(place):
                self._my_place[field] = value
            self._announced = place
        self.publish(round_, ANNOUNCED)

    def announced(self) -> bytes:
        """Every rank's announced place, raw (after ``reached(ANNOUNCED, round_)``)."""
        return bytes(self._places)

    def places(self, announced: bytes) -> list[tuple[int, ...]]:
        """``announced()`` as one tuple of ``PLACE_FIELDS`` integers per rank."""
        fields = memoryview(announced).cast("q")
        return [tuple(fields[q * PLACE_FIELDS:(q + 1) * PLACE_FIELDS])
                for q in range(self.size)]

    def fail(self, last_round: int) -> None:
        """Abandon an operation whose rounds end at ``last_round``: mark it FAILED, then
        publish every kind of work for all its rounds, so that no peer waits for work this
        rank will never do and the next operation's gates hold as usual.  Peers see the
        mark (published first) before any counter it enables (``failed_peer``)."""
        self.publish(last_round, FAILED)
        self.publish(last_round, COPIED_IN, REDUCED, COPIED_OUT, ANNOUNCED)

    def failed_peer(self, first_round: int) -> int | None:
        """A rank that abandoned an operation whose rounds reach ``first_round`` or later
        (the current one), or None."""
        for line in self._peers:
            if self.flags[line + FAILED] >= first_round:
                return line // LINE
        return None

    def reached(self, kind: int, round_: int) -> bool:
        """True once every other rank has published ``kind`` for ``round_`` (or later)."""
        flags = self.flags
        for line in self._peers:
            if flags[line + kind] < round_:
                return False
        self._win.Sync()
        return True

    def close(self) -> None:
        """Free the window (collective over the node; called by ``comm.free()``)."""
        win, self._win = self._win, None
        if win is not None and not MPI.Is_finalized():
            win.Unlock_all()
            win.Free()


def _missing(comm):
    """Words on which ranks have not reached this rank's latest collective, from the
    communicator's arrival counters (None without them)."""
    counters = comm.arrivals
    if counters is None:
        return None
    number = counters.count
    return lambda: counters.missing(number)
