"""``AluminumWork``: the ``torch.distributed.Work`` an asynchronous collective returns.

It wraps one or more aluminum ``Request``s.  Its ``Future`` completes from the requests'
done callbacks (on the engine thread, or on a thread driving the engine inside ``wait``):
no polling thread.  ``finish``, when given, runs once every request is done and before the
future completes: the copy out of a staging tensor that some collectives need, so a
``get_future().then(...)`` callback (DDP's comm hooks) sees the final result.
"""
from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Callable, Sequence

import torch
import torch.distributed as dist

import aluminum as al


class AluminumWork(dist.Work):
    """A collective in flight; ``wait()`` drives it to completion on the calling thread."""

    def __init__(self, requests: Sequence[al.Request], result: list[torch.Tensor],
                 finish: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._requests = requests
        self._result = result
        self._finish = finish
        self._future: torch.futures.Future = torch.futures.Future()
        self._done_count = itertools.count(1)     # next() is atomic under the GIL
        for request in requests:
            request.add_done_callback(self._one_done)
        if not requests:
            self._complete()

    def _one_done(self, request: al.Request) -> None:
        try:
            request.test()                          # raises the operation's error, if any
        except al.AluminumError as error:
            if not self._future.done():
                self._future.set_exception(error)
            return
        if next(self._done_count) == len(self._requests):
            self._complete()

    def _complete(self) -> None:
        try:
            if self._finish is not None:
                self._finish()
        except Exception as error:  # noqa: BLE001 - delivered to whoever waits
            self._future.set_exception(error)
            return
        self._future.set_result(self._result)

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until the collective is done (its output written) and return True.

        Raises the operation's error (an ``al.AluminumError``); ``timeout`` (torch passes a
        ``timedelta``, zero meaning none) raises ``al.TimeoutError`` when it expires."""
        seconds = timeout.total_seconds() if timeout else None
        for request in self._requests:
            request.wait(seconds)
        # The last done callback may still be running on the engine thread (a request is
        # marked done before its callbacks run): the future is what says the copy-out ran.
        self._future.wait()
        return True

    def get_future(self) -> torch.futures.Future:
        """A future completed with the output tensors (a list) once the collective is done."""
        return self._future

    def is_completed(self) -> bool:
        """True once the collective is done and its output written; never blocks."""
        return self._future.done()

    def is_success(self) -> bool:
        """True once the collective completed without an error."""
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001 - any error means "not a success"
            return False
        return True

    def result(self) -> list[torch.Tensor]:
        """The output tensors (valid once ``wait`` returned)."""
        return self._result

    def exception(self) -> BaseException | None:
        """The error the collective failed with, None if it succeeded or is still running."""
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as error:  # noqa: BLE001
            return error
        return None
