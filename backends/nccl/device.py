"""Device memory and stream primitives the NCCL operations need beside NCCL itself (cupy).

``CupyDeviceOps`` is the only implementation in the library; tests stand in one that works on
host memory and host streams (tests/nccl_fakes.py), with the same methods:

- ``as_stream(stream)``: the user's stream as a runtime stream (``ArgumentError`` if it is
  not a stream this device runs);
- ``new_internal_stream()``: the stream nonblocking operations run on;
- ``handle(stream)``: what NCCL calls take as their stream (the raw ``cudaStream_t``);
- ``empty(nbytes, stream)`` / ``address(array)``: scratch device memory, stream-ordered;
- ``copy(dst, src, nbytes, stream)``: an asynchronous device copy between addresses;
- ``to_flags`` / ``from_flags``: the 0/1 bytes logical reductions run on (datatypes.py).

Scratch memory comes from cupy's pool while ``stream`` is current.  cupy's pool is
stream-aware: a block freed by a blocking operation is reused only by later work on the same
stream, so it needs no keeping alive; nonblocking operations keep theirs until complete.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...core.errors import ArgumentError
from ..runtime.cupy_runtime import RUNTIME, CupyStream

# CUDA clamps a priority outside the device's range to the nearest end, so this asks for the
# highest priority the device offers (cupy exposes no cudaDeviceGetStreamPriorityRange).
_HIGHEST_PRIORITY = -1000


def _cupy() -> Any:
    import cupy
    return cupy


class CupyDeviceOps:
    """Device primitives over cupy, for streams that are ``CupyStream``s."""

    @staticmethod
    def as_stream(stream: object) -> CupyStream:
        """Wrap a cupy stream, a ``__cuda_stream__`` object or a torch CUDA stream."""
        try:
            return RUNTIME.as_stream(stream)
        except TypeError as exc:
            raise ArgumentError(f"stream: the nccl backend needs a CUDA stream (cupy, torch or "
                                f"__cuda_stream__), got {type(stream).__name__}") from exc

    def new_internal_stream(self) -> CupyStream:
        """A non-blocking stream of the highest priority on the current device."""
        return CupyStream(_cupy().cuda.Stream(non_blocking=True, priority=_HIGHEST_PRIORITY))

    @staticmethod
    def handle(stream: CupyStream) -> int:
        return stream.ptr

    def empty(self, nbytes: int, stream: CupyStream) -> Any:
        """``nbytes`` of uninitialised device memory, ordered on ``stream``."""
        cupy = _cupy()
        with stream.cupy_stream:
            return cupy.empty(max(nbytes, 1), cupy.uint8)

    @staticmethod
    def address(array: Any) -> int:
        return array.data.ptr

    def copy(self, dst: int, src: int, nbytes: int, stream: CupyStream) -> None:
        """Enqueue ``cudaMemcpyAsync`` of ``nbytes`` from ``src`` to ``dst`` (no overlap)."""
        if nbytes:
            runtime = _cupy().cuda.runtime
            runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDefault, stream.ptr)

    def to_flags(self, src: int, count: int, dtype: np.dtype, stream: CupyStream) -> Any:
        """A new uint8 device array holding ``src[i] != 0`` for ``count`` elements."""
        cupy = _cupy()
        with stream.cupy_stream:
            flags = cupy.empty(max(count, 1), cupy.uint8)
            if count:
                cupy.not_equal(_view(src, count, dtype), 0, out=flags[:count].view(cupy.bool_))
        return flags

    def from_flags(self, dst: int, dtype: np.dtype, flags: Any, offset: int, count: int,
                   parity: bool, stream: CupyStream) -> None:
        """Write ``flags[offset:offset + count]`` (its lowest bit when ``parity``) as 0/1
        values of ``dtype`` into the ``count`` elements at ``dst``."""
        if not count:
            return
        cupy = _cupy()
        with stream.cupy_stream:
            result = flags[offset:offset + count]
            if parity:
                result = cupy.bitwise_and(result, 1)
            out = _view(dst, count, dtype)
            if out.dtype == cupy.bool_:
                cupy.not_equal(result, 0, out=out)
            else:
                out[...] = result


def _view(ptr: int, count: int, dtype: np.dtype) -> Any:
    """A cupy array over ``count`` elements of ``dtype`` at device address ``ptr``."""
    cupy = _cupy()
    dtype = np.dtype(dtype)
    memory = cupy.cuda.UnownedMemory(ptr, count * dtype.itemsize, None)
    return cupy.ndarray((count,), dtype, cupy.cuda.MemoryPointer(memory, 0))
