"""Buffers allocated in memory the ranks of a node share (``al.shared_empty``).

Each allocation is one ``MPI.Win.Allocate_shared`` over the communicator's node-local ranks (a
collective: every rank allocates, in the same order, so allocation ``i`` means the same one
everywhere) and gives each rank its own segment, which every other rank of the node can also
read and write.  ``shared_memory`` allreduces on such buffers reduce straight out of every
rank's buffer and write the result straight into it, with no staging copies (see
shared_memory.py), the way NCCL's registered buffers or PyTorch's symmetric memory let a
library skip its own copies.

The segments live until ``comm.free()`` (or ``al.finalize()``), which is collective anyway: a
segment any rank still holds an array of is then kept (and reported with a warning) instead
of being freed under that array.
"""
from __future__ import annotations

import bisect
import ctypes
import gc
import warnings
import weakref

import numpy as np
from mpi4py import MPI

from ....core.errors import OperationError
from .. import rendezvous

NOT_SHARED = (-1, 0, -1, 0, 0)    # the place a rank announces when its buffers are private
_kept: list = []                   # windows still in use at comm.free(): never freed
_CACHED_PLANS = 64


def _dead_reference():
    """A dead weak reference's stand-in."""
    return None


def _address(array: np.ndarray) -> int:
    """The address of a C-contiguous array's first byte.  ctypes reads it from a writable
    buffer in about a third of the time ``__array_interface__`` takes (0.65 against 2.3 µs
    here); read-only arrays, and dtypes that cannot be exported as a buffer (bfloat16 and
    other non-builtin dtypes), take the slow way."""
    if array.flags.writeable and array.dtype.isbuiltin == 1:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    return array.__array_interface__["data"][0]


class SharedBuffers:
    """The shared allocations of one communicator, in allocation order."""

    KEY = "shared_buffers"

    @classmethod
    def of(cls, comm) -> "SharedBuffers":
        """The communicator's registry, created on first use."""
        return comm.scratch(cls.KEY, lambda: cls(comm.local_comm))

    @classmethod
    def find(cls, comm) -> "SharedBuffers | None":
        """The registry, or None when the communicator never allocated shared buffers."""
        return comm.scratch(cls.KEY)

    def __init__(self, local: MPI.Comm):
        self._local = local
        self._rank, self._size = local.Get_rank(), local.Get_size()
        self._windows: list[MPI.Win] = []
        self._segments: list[list[np.ndarray]] = []    # [allocation][rank]: uint8 arrays
        self._bounds: list[tuple[int, int]] = []        # this rank's [start, end) addresses
        self._starts: list[tuple[int, int]] = []        # (start, allocation), sorted
        self._handed_out: list[weakref.ref] = []
        self._by_exporter: dict[int, int] = {}          # id(exporter) -> allocation
        self._last_place = _dead_reference, _dead_reference, NOT_SHARED
        self.plans: dict = {}      # see remember()

    def allocate(self, nbytes: int) -> np.ndarray:
        """This rank's segment of a new allocation, as ``nbytes`` uint8 (collective)."""
        rendezvous.enter(self._local, f"al.shared_empty: allocating {nbytes} bytes "
                                      f"(MPI_Win_allocate_shared)")
        try:
            win = MPI.Win.Allocate_shared(nbytes, 64, comm=self._local)
        except MPI.Exception as exc:
            raise OperationError(f"shared_empty: MPI could not allocate {nbytes} bytes of "
                                 f"shared memory: {exc}") from exc
        segments = []
        for owner in range(self._size):
            memory, _ = win.Shared_query(owner)
            segments.append(np.frombuffer(memory, np.uint8) if len(memory) else
                            np.empty(0, np.uint8))
        # The caller's array gets an exporter of its own: every view of it (numpy collapses
        # view chains to that array) keeps it alive, so the weak reference tells whether
        # any is still in use.
        exporter = np.frombuffer(win.Shared_query(self._rank)[0], np.uint8) if nbytes else \
            np.empty(0, np.uint8)
        start = exporter.__array_interface__["data"][0]
        self._windows.append(win)
        self._segments.append(segments)
        self._bounds.append((start, start + nbytes))
        if nbytes:
            bisect.insort(self._starts, (start, len(self._bounds) - 1))
        self._handed_out.append(weakref.ref(exporter))
        self._by_exporter[id(exporter)] = len(self._bounds) - 1
        return exporter[:nbytes]

    def place(self, send: np.ndarray, recv: np.ndarray) -> tuple[int, ...]:
        """What a rank announces for an allreduce from ``send`` into ``recv``: (send
        allocation, offset, recv allocation, offset, bytes) when both lie in this rank's
        segments, ``NOT_SHARED`` otherwise.  The last pair's answer is remembered (by weak
        references): training loops pass the same arrays every step."""
        last_send, last_recv, found = self._last_place
        if last_send() is send and last_recv() is recv:
            return found
        send_at = self.locate(send)
        recv_at = send_at if recv is send else self.locate(recv)
        found = NOT_SHARED if send_at is None or recv_at is None else \
            send_at + recv_at + (recv.nbytes,)
        self._last_place = weakref.ref(send), weakref.ref(recv), found
        return found

    def locate(self, array: np.ndarray) -> tuple[int, int] | None:
        """(allocation, byte offset) of a C-contiguous array lying wholly in one of this
        rank's segments; None when it does not (or is empty).

        Views of the returned arrays are found by their base (numpy collapses view chains
        onto it); other arrays over the same memory (the numpy view of a torch tensor made
        with ``torch.from_numpy``, an array over a memoryview) by their address."""
        if array.nbytes == 0 or array.base is None:     # (an array owning its memory: private)
            return None
        start = _address(array)
        index = self._by_exporter.get(id(array.base))
        if index is None:
            at = bisect.bisect_right(self._starts, (start, len(self._bounds))) - 1
            if at < 0:
                return None
            index = self._starts[at][1]
        low, high = self._bounds[index]                 # (also: an id reused by another object)
        return (index, start - low) if low <= start and start + array.nbytes <= high else None

    def arrays(self, places: list[tuple[int, ...]],
               dtype: np.dtype) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every rank's (send, recv) arrays of ``dtype`` from the places they announced
        (send allocation, offset, recv allocation, offset, bytes)."""
        return tuple([self._segments[place[at]][owner][place[at + 1]:place[at + 1] + place[4]]
                      .view(dtype) for owner, place in enumerate(places)] for at in (0, 2))

    def remember(self, key, plan) -> None:
        """Keep ``plan`` (work on these segments, built by shared_memory.py) in ``plans``
        under ``key``, forgetting the oldest beyond a few dozen; ``close`` drops them all."""
        if len(self.plans) >= _CACHED_PLANS:
            self.plans.pop(next(iter(self.plans)))
        self.plans[key] = plan

    def close(self) -> None:
        """Free the allocations no rank still uses (collective over the node)."""
        if MPI.Is_finalized():
            return
        mine = np.array([ref() is not None for ref in self._handed_out], np.bool_)
        if mine.any():   # arrays held only by garbage cycles not yet collected are unused
            gc.collect()
            mine = np.array([ref() is not None for ref in self._handed_out], np.bool_)
        used = np.zeros_like(mine)
        self._local.Allreduce(mine, used, MPI.LOR)
        for index, win in enumerate(self._windows):
            if used[index]:
                _kept.append(win)
            else:
                win.Free()
        if used.any():
            warnings.warn(f"comm.free(): {int(used.sum())} al.shared_empty buffer(s) still "
                          f"referenced; their shared memory is kept until the process exits",
                          RuntimeWarning, stacklevel=3)
        self._windows, self._segments, self._bounds, self._handed_out = [], [], [], []
        self._starts = []
        self.plans.clear()
        self._by_exporter.clear()
        self._last_place = _dead_reference, _dead_reference, NOT_SHARED
