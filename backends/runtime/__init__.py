"""Device runtimes: the streams, events, flags, pinned memory and copies backends build on.

Two runtimes implement one interface:

- ``host`` (``host.py``): each stream is a worker thread running enqueued work in FIFO order.
  It needs no GPU and lets the host-transfer backend and the stream semantics be tested
  everywhere.
- ``cupy`` (``cupy_runtime.py``): CUDA streams and events through cupy, imported lazily.

Every stream has ``synchronize()``, ``record_event() -> Event``, ``wait_event(event)`` and
``wait_flag(flag)``; every event has ``query()`` and ``synchronize()``.  A stream flag is a
one-shot host-side switch: a stream that reached ``wait_flag(flag)`` stalls, in order, until
some host thread calls ``flag.set()``.  Together with ``event.query()`` (the host polls a
stream) this is all Aluminum's host-transfer algorithms need.
"""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import DTypeLike

__all__ = [
    "DeviceRuntime", "Event", "Stream", "StreamFlag",
    "host_runtime", "cuda_runtime", "runtime_for", "drive_while_waiting", "waiting_driver",
]

# drive(predicate, timeout): makes progress on this thread towards ``predicate()`` while
# there is engine work to drive, returning when it is true, when nothing is left to drive, or
# after ``timeout``.  Installed by the host-transfer backend (the progress engine's
# ``drive_until``), so that a thread synchronizing a stream that waits on an HT flag runs the
# MPI step that sets the flag itself, as ``Request.wait`` does, instead of waiting for the
# engine thread to wake up.
_drive: Callable[[Callable[[], bool], float | None], None] | None = None


def drive_while_waiting(drive) -> None:
    """Install ``drive`` (see ``_drive``) for threads synchronizing streams and events."""
    global _drive
    _drive = drive


def waiting_driver():
    """The installed ``drive`` (see ``_drive``), or None."""
    return _drive


@runtime_checkable
class Event(Protocol):
    """A point in a stream's work; complete once everything enqueued before it has run."""

    def query(self) -> bool:
        """Return True if the event has completed; never blocks."""

    def synchronize(self, timeout: float | None = None) -> None:
        """Block the calling thread until the event has completed (the builtin TimeoutError
        if ``timeout`` seconds pass first)."""


@runtime_checkable
class StreamFlag(Protocol):
    """A one-shot host flag that streams can wait on."""

    def set(self) -> None:
        """Release every stream waiting on this flag (callable from any thread)."""

    def is_set(self) -> bool:
        """Return True once ``set`` has been called."""


@runtime_checkable
class Stream(Protocol):
    """An in-order queue of asynchronous work."""

    def synchronize(self, timeout: float | None = None) -> None:
        """Block the calling thread until all work enqueued so far has run (the builtin
        TimeoutError if ``timeout`` seconds pass first)."""

    def record_event(self) -> Event:
        """Enqueue and return an event that completes when earlier work has run."""

    def wait_event(self, event: Event) -> None:
        """Make work enqueued later on this stream wait until ``event`` completes."""

    def wait_flag(self, flag: StreamFlag) -> None:
        """Make work enqueued later on this stream wait until ``flag`` is set."""


class DeviceRuntime(abc.ABC):
    """Streams, pinned host memory and asynchronous copies of one kind of device."""

    name: str

    @abc.abstractmethod
    def is_available(self) -> bool:
        """Return True if this runtime can run work in this process."""

    @abc.abstractmethod
    def default_stream(self) -> Stream:
        """Return the stream used when the caller passes ``stream=None``."""

    @abc.abstractmethod
    def new_stream(self) -> Stream:
        """Create a new stream, independent of all others."""

    @abc.abstractmethod
    def as_stream(self, stream: object | None) -> Stream:
        """Return the runtime's stream for ``stream`` (``None`` means ``default_stream()``).

        Raises TypeError if ``stream`` is not a stream of this runtime.
        """

    @abc.abstractmethod
    def alloc_pinned(self, shape: int | tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
        """Allocate an uninitialised host array that asynchronous copies can use."""

    @abc.abstractmethod
    def copy_async(self, dst: object, src: object, stream: Stream) -> None:
        """Enqueue a copy of all bytes of ``src`` into ``dst`` (equal sizes, contiguous).

        Arguments are checked now; the bytes move when the stream reaches the copy, so both
        buffers must stay alive (and ``src`` unchanged) until then.
        """

    @abc.abstractmethod
    def new_flag(self) -> StreamFlag:
        """Create an unset flag for ``Stream.wait_flag``."""


def host_runtime() -> DeviceRuntime:
    """Return the host (worker-thread) runtime."""
    from .host import RUNTIME
    return RUNTIME


def cuda_runtime() -> DeviceRuntime:
    """Return the CUDA runtime (over cupy); it exists without cupy or a GPU.

    Not named ``cupy_runtime``: importing the submodule of that name would overwrite it.
    """
    from .cupy_runtime import RUNTIME
    return RUNTIME


def runtime_for(stream: object) -> DeviceRuntime:
    """Return the runtime that owns ``stream`` (a host stream or any CUDA stream object)."""
    from . import cupy_runtime as cuda, host
    if isinstance(stream, host.HostStream):
        return host.RUNTIME
    if cuda.is_cuda_stream(stream):
        return cuda.RUNTIME
    raise TypeError(
        f"stream: expected a HostStream or a CUDA stream, got {type(stream).__name__}")
