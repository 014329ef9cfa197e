"""The streams a ``ParallelExecutor`` runs ops on, and how one stream waits for another.

Every op handle names a stream (``compute``, ``fetch`` or ``communication``); each executor
maps the names to stream objects of one kind, chosen by the arrays it runs on:

- host arrays: ``compute`` is the executor's own threads (``ThreadStream``): a numpy kernel
  has finished when it returns, so it records no event and later ops have nothing to wait
  for.  ``fetch`` is an ``al.HostStream`` (``HostQueueStream``): fetched values are copied in
  order on it, after waiting for their producers' events.  ``communication`` is the
  communicator's stream when it has one (the host-transfer backend's host stream), else the
  executor's threads.
- cupy arrays: ``compute`` and ``fetch`` are two cupy streams (``CupyStream``);
  ``communication`` is the communicator's stream, else the compute stream.

A consumer on another stream than its producer waits for the event the producer recorded
after launching, as Paddle's op handles do: with ``sync="event"`` its stream waits (the
host goes on), with ``sync="wait"`` the host thread blocks until the event is complete and
then launches the consumer.  A ``ThreadStream`` cannot defer work, so it always waits on
the host.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import aluminum as al

SYNC_MODES = ("event", "wait")


class ThreadStream:
    """Work runs on the executor thread that launches it and has finished when ``launch``
    returns (host kernels): no events, nothing to synchronize."""

    inline = True

    def __init__(self, name: str) -> None:
        self.name = name

    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        fn(*args)

    def record_event(self) -> None:
        return None

    def wait_event(self, event) -> None:
        event.synchronize()

    def synchronize(self) -> None:
        pass


class _QueuedStream:
    """A stream object that defers work (``self.stream``): waits and synchronizes on it."""

    inline = False

    def wait_event(self, event) -> None:
        self.stream.wait_event(event)

    def synchronize(self) -> None:
        self.stream.synchronize()


class HostQueueStream(_QueuedStream):
    """An ``al.HostStream``: work runs in launch order, on the launching thread when the
    stream is idle and nothing waits ahead of it, else on the stream's own thread."""

    def __init__(self, name: str, stream: al.HostStream | None = None) -> None:
        self.name = name
        self.stream = stream or al.HostStream(f"al-executor-{name}")

    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        self.stream.enqueue_instant(fn, *args)

    def record_event(self):
        return self.stream.record_event()

    def close(self) -> None:
        self.stream.close()


class CommunicatorStream(_QueuedStream):
    """A communicator's own stream (host or CUDA): the op's kernel runs on the host and the
    communication call orders its work on the stream itself; the event is recorded after."""

    def __init__(self, name: str, stream) -> None:
        self.name, self.stream = name, stream
        self._record = getattr(stream, "record_event", None) or stream.record

    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        fn(*args)

    def record_event(self):
        return self._record()


class CupyStream(_QueuedStream):
    """A cupy stream: the kernel is called with the stream current, so cupy queues its work
    there and ``launch`` returns before it ran."""

    def __init__(self, name: str) -> None:
        import cupy

        self.name = name
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        with self.stream:
            fn(*args)

    def record_event(self):
        return self.stream.record()


def uses_cupy(values) -> bool:
    """True if any of ``values`` is a cupy array (cupy is not imported to find out)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and any(isinstance(value, cupy.ndarray) for value in values)


def make_streams(comm, on_gpu: bool) -> dict:
    """Stream name -> stream for one executor (see the module docstring)."""
    if on_gpu:
        compute, fetch = CupyStream("compute"), CupyStream("fetch")
    else:
        compute, fetch = ThreadStream("compute"), HostQueueStream("fetch")
    comm_stream = getattr(comm, "stream", None)
    if comm_stream is not None:
        communication = CommunicatorStream("communication", comm_stream)
    elif on_gpu:
        communication = compute
    else:
        communication = ThreadStream("communication")
    return {"compute": compute, "fetch": fetch, "communication": communication}


def wait_for(event, consumer, sync: str) -> None:
    """Order ``consumer``'s next launch after ``event`` (see the module docstring)."""
    if sync == "event" and not consumer.inline:
        consumer.wait_event(event)
    else:
        event.synchronize()
