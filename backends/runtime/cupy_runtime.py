"""CUDA stream runtime over cupy: streams, events, pinned memory, copies and host flags.

cupy is imported on first use, so this module imports (and ``RUNTIME`` exists) without cupy
or a GPU; ``RUNTIME.is_available()`` says whether it can run.

A stream waits on a host flag (an int in pinned host memory the host sets to 1) the way
Aluminum does: with a stream memory operation, ``cuStreamWaitValue32`` (libcuda through ctypes:
cupy does not expose it), where the driver takes it, else with a one-thread kernel spinning on
the volatile int.  ``AL_CUDA_FLAG_WAIT=kernel`` forces the kernel.  On an H100 the memory
operation took a wait-release-copy round trip from 56 to 47 µs and occupies no SM; an HT
allreduce costs about the same either way.  A flag that is never set stalls its stream
forever, and a device-wide synchronize waits for it too.

Seen on an H100 (driver 580): while a stream waits on a flag, loading a kernel not loaded
before (its first launch in the process: CUDA's lazy module loading, cupy's runtime
compilation) blocks the launching thread until the flag is set, with either way of waiting.
So a flag must be set by another thread than one that may launch new kernels meanwhile; the
host-transfer backend's are set by the progress engine.
"""
from __future__ import annotations

import collections
import ctypes
import functools
import math
import os
import threading
import time
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from . import DeviceRuntime, waiting_driver

__all__ = [
    "CupyEvent", "CupyStream", "CupyStreamFlag", "CupyRuntime", "RUNTIME", "is_cuda_stream",
]

_WAIT_FLAG_SOURCE = r"""
extern "C" __global__ void al_wait_flag(const volatile int* flag) {
    while (*flag == 0) {
#if __CUDA_ARCH__ >= 700
        __nanosleep(128);
#endif
    }
}
"""


def _cupy() -> Any:
    import cupy
    return cupy


@functools.lru_cache(maxsize=None)
def _wait_flag_kernel() -> Any:
    # RawKernel compiles on first launch and caches per device.
    return _cupy().RawKernel(_WAIT_FLAG_SOURCE, "al_wait_flag")


_WAIT_VALUE_GEQ = 0x0   # CU_STREAM_WAIT_VALUE_GEQ


@functools.lru_cache(maxsize=None)
def _stream_wait_value32() -> Any:
    """libcuda's ``cuStreamWaitValue32_v2`` (CUresult (CUstream, CUdeviceptr, uint32, uint)),
    or None where it is missing or ``AL_CUDA_FLAG_WAIT=kernel``."""
    if os.environ.get("AL_CUDA_FLAG_WAIT", "auto") == "kernel":
        return None
    try:
        wait = ctypes.CDLL("libcuda.so.1").cuStreamWaitValue32_v2
    except (OSError, AttributeError):
        return None
    wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    wait.restype = ctypes.c_int
    return wait


def _drive_towards(passed, timeout: float | None = None) -> None:
    """Drive engine work (an HT operation this stream waits for) until ``passed()``, nothing
    is left to drive or ``timeout`` seconds passed; the CUDA wait that follows then returns at
    once or soon.  ``passed`` is only called while the engine has work."""
    drive = waiting_driver()
    if drive is not None:
        drive(passed, timeout)


def _await_event(event: "CupyEvent", deadline: float, late: str) -> None:
    """Poll ``event`` until it has passed; the builtin TimeoutError saying ``late`` once the
    ``time.monotonic()`` ``deadline`` passed first (CUDA's own waits take no timeout).  Sleeps
    between polls, from 20 µs up to 1 ms, so a long wait neither spins nor holds the GIL."""
    pause = 20e-6
    while not event.query():
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(late)
        time.sleep(min(pause, left))
        pause = min(pause * 2, 1e-3)


def _new_cuda_event() -> Any:
    return _cupy().cuda.Event(block=False, disable_timing=True)


class CupyEvent:
    """A CUDA event recorded on a stream; ``query()`` polls it without blocking.

    It has the ``ptr`` of the event underneath, so a plain ``cupy.cuda.Stream.wait_event``
    accepts it too (``req.wait_on_stream(cupy_stream)`` relies on that).
    """

    __slots__ = ("cupy_event",)

    def __init__(self, cupy_event: Any) -> None:
        self.cupy_event = cupy_event

    @property
    def ptr(self) -> int:
        """The CUDA event handle."""
        return self.cupy_event.ptr

    def query(self) -> bool:
        """Return True if the GPU has passed the event."""
        return bool(self.cupy_event.done)

    def synchronize(self, timeout: float | None = None) -> None:
        """Block the calling thread until the GPU has passed the event (driving engine work
        that leads there meanwhile, see ``runtime.drive_while_waiting``).  Raises the builtin
        TimeoutError if ``timeout`` seconds pass first, as host events do."""
        deadline = None if timeout is None else time.monotonic() + timeout
        _drive_towards(self.query, timeout)
        if deadline is None:
            self.cupy_event.synchronize()
        else:
            _await_event(self, deadline, f"event: not complete after {timeout} s")


class CupyStreamFlag:
    """A one-shot int flag in pinned host memory that CUDA streams can wait on.

    With unified addressing, pinned host memory has the same address on the device, so the
    wait kernel reads it directly.
    """

    __slots__ = ("_memory", "_value", "ptr")

    def __init__(self) -> None:
        self._memory = _cupy().cuda.alloc_pinned_memory(4)
        self._value = np.frombuffer(self._memory, np.int32, 1)
        self._value[0] = 0
        self.ptr: int = self._memory.ptr

    def set(self) -> None:
        """Release every stream waiting on this flag (callable from any thread)."""
        self._value[0] = 1

    def is_set(self) -> bool:
        """Return True once ``set`` has been called."""
        return bool(self._value[0])


class _FlagsInUse:
    """Keeps flags alive until their streams have passed the wait kernel.

    Without this a flag dropped right after ``set()`` could return its pinned memory to
    cupy's pool, be handed to a new (zeroed) flag, and leave the kernel spinning forever.
    """

    def __init__(self) -> None:
        self._held: collections.deque[tuple[Any, CupyStreamFlag]] = collections.deque()
        self._lock = threading.Lock()

    def hold(self, passed: Any, flag: CupyStreamFlag) -> None:
        with self._lock:
            while self._held and self._held[0][0].done:
                self._held.popleft()
            self._held.append((passed, flag))


_FLAGS_IN_USE = _FlagsInUse()


class CupyStream:
    """A CUDA stream (a cupy stream underneath) with the runtime's stream interface.

    Wrappers of the same CUDA handle compare and hash equal, so per-stream bookkeeping keyed
    by stream works however often a user's stream is wrapped.
    """

    __slots__ = ("cupy_stream",)

    def __init__(self, cupy_stream: Any) -> None:
        self.cupy_stream = cupy_stream

    @property
    def ptr(self) -> int:
        """The raw ``cudaStream_t`` handle."""
        return self.cupy_stream.ptr

    def synchronize(self, timeout: float | None = None) -> None:
        """Block the calling thread until all work enqueued so far has run (driving engine
        work that leads there meanwhile, see ``runtime.drive_while_waiting``).  Raises the
        builtin TimeoutError if ``timeout`` seconds pass first, as host streams do."""
        marker = []   # recorded only if there is engine work to drive, or a timeout

        def passed() -> bool:
            if not marker:
                marker.append(self.record_event())
            return marker[0].query()

        deadline = None if timeout is None else time.monotonic() + timeout
        _drive_towards(passed, timeout)
        if deadline is None:
            self.cupy_stream.synchronize()
        else:
            _await_event(marker[0] if marker else self.record_event(), deadline,
                         f"stream: {self!r} not idle after {timeout} s")

    def record_event(self) -> CupyEvent:
        """Enqueue and return an event that completes when all earlier work has run."""
        event = _new_cuda_event()
        self.cupy_stream.record(event)
        return CupyEvent(event)

    def wait_event(self, event: Any) -> None:
        """Make later work on this stream wait for a CupyEvent or a ``cupy.cuda.Event``."""
        if isinstance(event, CupyEvent):
            event = event.cupy_event
        if not isinstance(event, _cupy().cuda.Event):
            raise TypeError(
                f"event: expected a CupyEvent or cupy.cuda.Event, got {type(event).__name__}")
        self.cupy_stream.wait_event(event)

    def wait_flag(self, flag: CupyStreamFlag) -> None:
        """Make later work on this stream wait until a host thread sets ``flag``."""
        if not isinstance(flag, CupyStreamFlag):
            raise TypeError(f"flag: expected a CupyStreamFlag, got {type(flag).__name__}")
        # Pinned host memory has the same address on the device (unified addressing).
        wait = _stream_wait_value32()
        if wait is None or wait(self.cupy_stream.ptr, flag.ptr, 1, _WAIT_VALUE_GEQ) != 0:
            with self.cupy_stream:   # no stream memory operations here: spin in a kernel
                _wait_flag_kernel()((1,), (1,), (np.uint64(flag.ptr),))
        passed = _new_cuda_event()
        self.cupy_stream.record(passed)
        _FLAGS_IN_USE.hold(passed, flag)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CupyStream) and other.ptr == self.ptr

    def __hash__(self) -> int:
        return hash(("cuda-stream", self.ptr))

    def __repr__(self) -> str:
        return f"<CupyStream 0x{self.ptr:x}>"


def is_cuda_stream(stream: object) -> bool:
    """Return True if ``stream`` is a CUDA stream object this runtime accepts (no import)."""
    if isinstance(stream, CupyStream):
        return True
    if type(stream).__module__.startswith("cupy") and hasattr(stream, "ptr"):
        return True
    return hasattr(stream, "__cuda_stream__") or isinstance(
        getattr(stream, "cuda_stream", None), int)


class _StreamHandle:
    """Presents an object's int ``cuda_stream`` through the CUDA stream protocol."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner  # cupy keeps this object, so the owner's stream stays alive

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.owner.cuda_stream)


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _pointer_and_nbytes(obj: object, name: str, writable: bool) -> tuple[int, int]:
    """Address and size of a contiguous device or host array (CUDA or numpy interface)."""
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None:
        interface = np.asarray(obj).__array_interface__
    shape = tuple(interface["shape"])
    itemsize = np.dtype(interface["typestr"]).itemsize
    strides = interface.get("strides")
    if strides is not None and not _c_contiguous(shape, tuple(strides), itemsize):
        raise ValueError(f"{name}: expected a C-contiguous array, got strides {tuple(strides)}")
    pointer, readonly = interface["data"]
    if writable and readonly:
        raise ValueError(f"{name}: expected a writable array, got a read-only one")
    return pointer, itemsize * math.prod(shape)


class CupyRuntime(DeviceRuntime):
    """The DeviceRuntime whose streams are CUDA streams, driven through cupy."""

    name = "cupy"

    def is_available(self) -> bool:
        """Return True if cupy imports and sees a usable GPU."""
        try:
            return bool(_cupy().is_available())
        except ImportError:
            return False

    def default_stream(self) -> CupyStream:
        """Return cupy's current stream for this thread (the null stream unless changed)."""
        return CupyStream(_cupy().cuda.get_current_stream())

    def new_stream(self) -> CupyStream:
        """Create a new non-blocking CUDA stream."""
        return CupyStream(_cupy().cuda.Stream(non_blocking=True))

    def as_stream(self, stream: object | None) -> CupyStream:
        """Wrap a cupy stream, a ``__cuda_stream__`` object, or one with an int ``cuda_stream``.

        Foreign streams (e.g. torch's) are borrowed, and kept alive while wrapped.
        """
        if stream is None:
            return self.default_stream()
        if isinstance(stream, CupyStream):
            return stream
        cuda = _cupy().cuda
        if isinstance(stream, (cuda.Stream, cuda.ExternalStream)):
            return CupyStream(stream)
        if hasattr(stream, "__cuda_stream__"):
            return CupyStream(cuda.Stream.from_external(stream))
        if isinstance(getattr(stream, "cuda_stream", None), int):
            return CupyStream(cuda.Stream.from_external(_StreamHandle(stream)))
        raise TypeError(
            f"stream: expected a cupy stream, a CUDA stream object, or None, "
            f"got {type(stream).__name__}")

    def alloc_pinned(self, shape: int | tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
        """Allocate an uninitialised numpy array in pinned memory from cupy's pinned pool.

        The array owns the memory; keep it alive until copies using it have completed.
        """
        dtype = np.dtype(dtype)
        shape = (int(shape),) if np.isscalar(shape) else tuple(shape)
        count = math.prod(shape)
        memory = _cupy().cuda.alloc_pinned_memory(max(count * dtype.itemsize, 1))
        return np.frombuffer(memory, dtype, count).reshape(shape)

    def copy_async(self, dst: object, src: object, stream: Any) -> None:
        """Enqueue ``cudaMemcpyAsync`` of all bytes of ``src`` into ``dst`` on ``stream``.

        Either side may be device memory (``__cuda_array_interface__``) or host memory
        (pinned for a truly asynchronous copy); both contiguous, equal byte sizes.
        """
        dst_ptr, dst_nbytes = _pointer_and_nbytes(dst, "dst", writable=True)
        src_ptr, src_nbytes = _pointer_and_nbytes(src, "src", writable=False)
        if dst_nbytes != src_nbytes:
            raise ValueError(
                f"dst: expected {src_nbytes} bytes (the size of src), got {dst_nbytes}")
        runtime = _cupy().cuda.runtime
        runtime.memcpyAsync(dst_ptr, src_ptr, src_nbytes, runtime.memcpyDefault, stream.ptr)

    def new_flag(self) -> CupyStreamFlag:
        """Create an unset flag in pinned host memory."""
        return CupyStreamFlag()


RUNTIME = CupyRuntime()
