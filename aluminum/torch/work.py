"""``AluminumWork``: the ``torch.distributed.Work`` an asynchronous collective returns.

It wraps one or more aluminum ``Request``s.  ``wait()`` waits for them on the calling thread
(driving the engine), then runs ``finish``, when given: the copy out of a staging tensor that
some collectives need.  The ``Future`` is made only when someone asks for it
(``get_future()``: DDP's reducer and comm hooks do, ``dist.all_reduce(..., async_op=True)
.wait()`` does not): a torch Future and the done callbacks that complete it cost more than a
small collective itself.  It then completes from the requests' done callbacks (on the engine
thread, or on a thread driving the engine), after ``finish`` ran, so a ``then(...)`` callback
sees the final result.

On a CUDA device ``wait()`` blocks nothing: it makes torch's current stream wait for the
operations (as torch's ``nccl`` backend does) and enqueues ``finish`` there; the host learns
of completion only through ``is_completed()`` or the Future.
"""
from __future__ import annotations

import itertools
import threading
from datetime import timedelta
from typing import Callable, Sequence

import torch
import torch.distributed as dist

import aluminum as al

from . import devices


class AluminumWork(dist.Work):
    """A collective in flight; ``wait()`` drives it to completion on the calling thread."""

    def __init__(self, requests: Sequence[al.Request], result: list[torch.Tensor],
                 finish: Callable[[], None] | None = None,
                 device: torch.device | None = None) -> None:
        super().__init__()
        self._requests = requests
        self._result = result
        self._finish = finish
        self._device = device              # a CUDA device: wait() orders its current stream
        self._lock = threading.Lock()
        self._settled = False              # every request done and ``finish`` ran (or failed)
        self._error: BaseException | None = None
        self._future: torch.futures.Future | None = None

    def _settle(self) -> None:
        """Once every request is done: record the first error, else run ``finish``; then
        complete the future if one was asked for.  Runs its body once, whoever calls first."""
        with self._lock:
            if self._settled:
                return
            error = None
            for request in self._requests:
                try:
                    request.test()                  # raises the operation's error, if any
                except Exception as exc:  # noqa: BLE001 - delivered to whoever waits
                    error = error or exc
            if error is None:
                try:
                    self._run_finish()
                except Exception as exc:  # noqa: BLE001 - delivered to whoever waits
                    error = exc
            self._error, self._settled = error, True
            future = self._future
        if future is not None:       # outside the lock: the future runs its callbacks here
            self._deliver(future)

    def _deliver(self, future: torch.futures.Future) -> None:
        if self._error is not None:
            future.set_exception(self._error)
        else:
            future.set_result(self._result)

    def _run_finish(self) -> None:
        finish, self._finish = self._finish, None       # once, whoever gets here first
        if finish is not None:
            finish()

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until the collective is done (its output written) and return True; on a
        CUDA device, make torch's current stream wait for it instead (the host goes on).

        Raises the operation's error (an ``al.AluminumError``); ``timeout`` (torch passes a
        ``timedelta``, zero meaning none) raises ``al.TimeoutError`` when it expires."""
        if self._device is not None:
            stream = devices.current_stream(self._device)
            for request in self._requests:
                request.wait_on_stream(stream)
            with self._lock:
                self._run_finish()
            return True
        seconds = timeout.total_seconds() if timeout else None
        for request in self._requests:
            request.wait(seconds)
        self._settle()
        if self._error is not None:
            raise self._error
        return True

    def get_future(self) -> torch.futures.Future:
        """A future completed with the output tensors (a list) once the collective is done,
        or with its error."""
        with self._lock:
            future, made = self._future, self._future is None
            if made:
                future = self._future = torch.futures.Future()
            settled = self._settled
        if made:
            if settled:
                self._deliver(future)
            elif not self._requests:
                self._settle()
            else:
                left = itertools.count(len(self._requests) - 1, -1)   # next() is atomic

                def one_done(_request: al.Request) -> None:
                    if next(left) == 0:
                        self._settle()
                for request in self._requests:
                    request.add_done_callback(one_done)
        return future

    def is_completed(self) -> bool:
        """True once the collective is done and its output written; never blocks."""
        if not self._settled and all(request.done for request in self._requests):
            self._settle()
        return self._settled

    def is_success(self) -> bool:
        """True once the collective completed without an error."""
        return self.is_completed() and self._error is None

    def result(self) -> list[torch.Tensor]:
        """The output tensors (valid once ``wait`` returned)."""
        return self._result

    def exception(self) -> BaseException | None:
        """The error the collective failed with, None if it succeeded or is still running."""
        return self._error if self.is_completed() else None
