"""Communication hooks for ``aluminum.torch.DistributedDataParallel.register_comm_hook``.

A hook is ``hook(state, bucket: GradBucket) -> torch.futures.Future`` whose value is the
bucket's averaged gradients (a tensor of ``bucket.buffer()``'s shape and dtype; the DDP copies
it into the bucket unless it *is* the bucket).  It replaces the bucket's persistent AVG
allreduce, so it must average across ``state`` (an ``al.Communicator``) itself.  The built-in
compression hooks send half the bytes: the buffer is rounded to fp16/bf16, averaged in that
dtype (aluminum reduces 16-bit floats in fp32 and rounds once), and widened back.
"""
from __future__ import annotations

from typing import Callable

import torch

import aluminum as al

class GradBucket:
    """What a comm hook sees of one bucket (the names of torch's ``dist.GradBucket``)."""

    def __init__(self, index: int, buffer: torch.Tensor, parameters: list[torch.nn.Parameter],
                 is_last: bool) -> None:
        self._index, self._buffer, self._parameters, self._is_last = \
            index, buffer, parameters, is_last

    def index(self) -> int:
        """Position in launch order (0 launches first)."""
        return self._index

    def buffer(self) -> torch.Tensor:
        """The flat bucket: every parameter's gradient, back to back (they are views of it)."""
        return self._buffer

    def parameters(self) -> list[torch.nn.Parameter]:
        return self._parameters

    def gradients(self) -> list[torch.Tensor]:
        return [p.grad for p in self._parameters]

    def is_last(self) -> bool:
        """True for the bucket that launches last in the iteration."""
        return self._is_last


def request_future(request: al.Request, finish: Callable[[], object]) -> torch.futures.Future:
    """A torch Future completed (from ``request``'s done callback) with ``finish()``'s value,
    or with the request's error."""
    future: torch.futures.Future = torch.futures.Future()

    def done(req: al.Request) -> None:
        try:
            req.test()                       # raises the operation's error, if any
            future.set_result(finish())
        except Exception as error:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(error)
    request.add_done_callback(done)
    return future


def allreduce_avg_hook(comm: al.Communicator, bucket: GradBucket) -> torch.futures.Future:
    """The default behaviour as a hook: average the bucket in place (nonblocking)."""
    buffer = bucket.buffer()
    return request_future(al.nonblocking_allreduce(buffer, comm, op=al.AVG), lambda: buffer)


def _compress_hook(dtype: torch.dtype):
    def hook(comm: al.Communicator, bucket: GradBucket) -> torch.futures.Future:
        buffer = bucket.buffer()
        compressed = buffer.to(dtype)
        request = al.nonblocking_allreduce(compressed, comm, op=al.AVG)
        return request_future(request, lambda: buffer.copy_(compressed))
    return hook


fp16_compress_hook = _compress_hook(torch.float16)
fp16_compress_hook.__doc__ = """Average the bucket in float16 (half the bytes on the wire);
the result is rounded to fp16 precision and range (values beyond 65504 overflow)."""
bf16_compress_hook = _compress_hook(torch.bfloat16)
bf16_compress_hook.__doc__ = """Average the bucket in bfloat16 (half the bytes, fp32's range,
8 bits of mantissa)."""
