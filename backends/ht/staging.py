"""Host staging memory for the host-transfer backend: a per-communicator pool and copy regions.

Every host-transfer operation copies its device buffers into host memory (D2H), lets MPI work
there, and copies results back (H2D).  The host side comes from a ``StagingPool`` kept in
``comm.scratch``: pinned memory from cupy's pinned pool on CUDA streams (so the copies are
truly asynchronous), plain host memory on host streams.  Reusing buffers matters beyond the
allocation itself: a fresh multi-megabyte host array page-faults on first touch, which costs
about as much as the copy into it.

A buffer goes back to the pool only once no stream can still touch it: the operation returns
it at completion, after the stream passed its last copy (``give_back``), or, if the operation
failed before that, once an event recorded after its last copy has completed
(``give_back_after``).
"""
from __future__ import annotations

import collections
import threading

import numpy as np

from ...core.buffers import HOST, Buffer

__all__ = ["StagingPool", "DeviceRegion", "staging_pool", "region"]

_MIN_BYTES = 4096       # smallest size class: one page
_IDLE_PER_CLASS = 4     # idle buffers kept per (runtime, size class); more are freed


class StagingPool:
    """Reusable host staging buffers of one communicator, in power-of-two size classes.

    ``take`` runs on the calling thread and ``give_back`` on the progress engine; both only
    touch per-class deques (atomic ``append``/``pop``), so no lock guards the fast path.
    """

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], collections.deque[np.ndarray]] = {}
        self._deferred: collections.deque[tuple[object, list]] = collections.deque()
        self._deferred_lock = threading.Lock()
        self.allocated = 0   # buffers allocated so far (the rest of the takes reused one)

    def take(self, runtime, dtype: np.dtype, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``(raw, view)``: a pooled byte buffer and its first ``count`` elements of ``dtype``.

        Return ``raw`` with ``give_back`` or ``give_back_after``; ``view`` is uninitialised.
        """
        if self._deferred:
            self._reclaim()
        nbytes = count * dtype.itemsize
        size = max(_MIN_BYTES, 1 << (nbytes - 1).bit_length())
        idle = self._idle.get((runtime.name, size))
        try:
            raw = idle.pop()
        except (AttributeError, IndexError):   # no deque for this class yet, or empty
            raw = runtime.alloc_pinned(size, np.uint8)
            self.allocated += 1
        return raw, raw[:nbytes].view(dtype)

    def give_back(self, raws: list[np.ndarray], runtime) -> None:
        """Return buffers (from ``take`` with ``runtime``) no stream will touch again."""
        for raw in raws:
            idle = self._idle.setdefault((runtime.name, raw.nbytes), collections.deque())
            if len(idle) < _IDLE_PER_CLASS:
                idle.append(raw)

    def give_back_after(self, event, raws: list[np.ndarray], runtime) -> None:
        """Return buffers once ``event`` (recorded after their last copy) has completed;
        until then the pool keeps them alive, so a late copy never hits freed memory."""
        with self._deferred_lock:
            self._deferred.append((event, raws, runtime))

    def close(self) -> None:
        """Drop the idle buffers (called by ``comm.free()``)."""
        self._idle.clear()

    def _reclaim(self) -> None:
        with self._deferred_lock:
            while self._deferred and self._deferred[0][0].query():
                _, raws, runtime = self._deferred.popleft()
                self.give_back(raws, runtime)


def staging_pool(comm) -> StagingPool:
    """The communicator's staging pool, created on first use."""
    return comm.scratch("ht_staging", StagingPool)


class DeviceRegion:
    """``nbytes`` of device memory at ``ptr``, as a byte array ``copy_async`` accepts."""

    __slots__ = ("__cuda_array_interface__", "owner")

    def __init__(self, ptr: int, nbytes: int, owner: object) -> None:
        self.owner = owner   # keeps the user's device buffer alive while a copy is queued
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "version": 3, "strides": None,
            "data": (ptr, False),
        }


def region(buf: Buffer, start: int, count: int):
    """Elements ``[start, start + count)`` of ``buf`` as something ``copy_async`` accepts:
    a numpy view of host memory, a ``DeviceRegion`` of device memory."""
    if buf.device == HOST:
        return buf.array[start:start + count]
    itemsize = buf.dtype.itemsize
    return DeviceRegion(buf.address + start * itemsize, count * itemsize, buf.obj)
