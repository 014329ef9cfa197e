"""The two ways an NCCL operation runs, shared by every operation of the backend.

Each operation is a ``NCCLState`` subclass with one class method,
``enqueue(ctx, comm, stream, *op_args)``, that issues its NCCL calls (and any device copies)
on ``stream`` and returns the scratch arrays they use.

- Blocking (``run_blocking``): ``enqueue`` on the caller's stream (the per-call ``stream=``
  or the communicator's) and return: stream-ordered, the host never waits.
- Nonblocking (``__init__``, then the engine): the communicator's internal high-priority
  stream first waits on an event recorded on the caller's stream, the operation is enqueued
  there, and an event recorded after it completes the request.  Everything is enqueued on the
  caller's thread, so NCCL calls keep the program's order on every rank; the engine only
  polls the event.  ``req.wait()`` blocks the host until the event has passed;
  ``req.wait_on_stream(s)`` makes ``s`` wait on the event and returns at once.

NCCL and CUDA errors surface as ``al.OperationError`` with the original as ``__cause__``.
"""
from __future__ import annotations

from ...engine.state import Action, State
from ...core.errors import AluminumError, OperationError
from .context import context_of
from .datatypes import reduction_plan


class NCCLState(State):
    """Base of every NCCL operation; see the module docstring."""

    name = "nccl"
    progresses_alone = True   # all on the GPU; step() only polls the completion event

    def __init__(self, comm, stream, *op_args):
        ctx = context_of(comm)
        user = ctx.device.as_stream(stream)
        self.compute_stream = user
        with self._errors():
            internal = ctx.internal_stream()
            internal.wait_event(user.record_event())
            self._scratch = self.enqueue(ctx, comm, internal, *op_args)
            self._done = internal.record_event()

    @classmethod
    def run_blocking(cls, comm, stream, *op_args) -> None:
        ctx = context_of(comm)
        stream = ctx.device.as_stream(stream)
        with cls._errors():
            cls.enqueue(ctx, comm, stream, *op_args)

    @classmethod
    def enqueue(cls, ctx, comm, stream, *op_args) -> list:
        """Issue the operation on ``stream``; return the scratch arrays it uses."""
        raise NotImplementedError

    def step(self) -> Action:
        if not self._done.query():
            return Action.CONTINUE
        self._scratch = None
        return Action.COMPLETE

    def completion_event(self):
        """The event after the operation, as the stream's own library knows it (a
        ``cupy.cuda.Event`` for CUDA streams), so any stream of that library can wait on it."""
        return getattr(self._done, "cupy_event", self._done)

    @classmethod
    def _errors(cls) -> "_WrappedErrors":
        return _WrappedErrors(cls.name)


class _WrappedErrors:
    """``with``: re-raise cupy's NcclError / CUDARuntimeError as ``al.OperationError`` (the
    original as ``__cause__``); aluminum's own errors pass as they are.  A plain class: a
    ``contextlib.contextmanager`` costs a tenth of a small NCCL call."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> bool:
        if exc is None or isinstance(exc, AluminumError) or not isinstance(exc, Exception):
            return False
        raise OperationError(f"{self.name}: {type(exc).__name__}: {exc}") from exc


class NCCLReduction(NCCLState):
    """Base of the reductions: one ``reduce`` method serves native and logical ops.

    Subclasses take ``(sendbuf, recvbuf, op, *rest)`` and define

    - ``reduce(ctx, comm, send, recv, count, itemsize, plan, handle, *rest)``: the NCCL
      calls reducing ``count`` elements at address ``send`` into ``recv``; ``recv == send``
      means in place, in NCCL's sense (each rank's result at ``result_span``);
    - ``result_span(comm, count, *rest)``: ``(offset, length)`` in elements of this rank's
      result within an in-place reduced buffer, or None if this rank gets none.

    Logical ops (datatypes.py) reduce 0/1 bytes in scratch memory in place, then write the
    span back into ``recvbuf`` in its dtype.  In-place native ops whose span does not start
    at 0 (reduce-scatter) move the result to the front, as aluminum's in-place semantics say.
    """

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf, op, *rest) -> list:
        plan = reduction_plan(op, sendbuf.dtype)
        device, handle = ctx.device, ctx.device.handle(stream)
        span = cls.result_span(comm, sendbuf.count, *rest)
        if plan.logical:
            flags = device.to_flags(sendbuf.ptr, sendbuf.count, sendbuf.dtype, stream)
            address = device.address(flags)
            cls.reduce(ctx, comm, address, address, sendbuf.count, 1, plan, handle, *rest)
            if span is not None:
                device.from_flags(recvbuf.ptr, recvbuf.dtype, flags, *span, plan.parity,
                                  stream)
            return [flags]
        itemsize = sendbuf.dtype.itemsize
        if sendbuf is recvbuf:
            cls.reduce(ctx, comm, sendbuf.ptr, sendbuf.ptr, sendbuf.count, itemsize, plan,
                       handle, *rest)
            offset, length = span
            return move_to_front(ctx, stream, recvbuf.ptr, offset * itemsize,
                                 length * itemsize)
        recv = sendbuf.ptr if recvbuf is None else recvbuf.ptr
        cls.reduce(ctx, comm, sendbuf.ptr, recv, sendbuf.count, itemsize, plan, handle, *rest)
        return []

    @staticmethod
    def reduce(ctx, comm, send, recv, count, itemsize, plan, handle, *rest) -> None:
        raise NotImplementedError

    @staticmethod
    def result_span(comm, count, *rest):
        return 0, count


def move_to_front(ctx, stream, base: int, offset: int, nbytes: int) -> list:
    """Copy ``nbytes`` at ``base + offset`` to ``base`` (through scratch when they overlap);
    return the scratch used."""
    if offset == 0 or nbytes == 0:
        return []
    device = ctx.device
    if offset >= nbytes:
        device.copy(base, base + offset, nbytes, stream)
        return []
    bounce = device.empty(nbytes, stream)
    device.copy(device.address(bounce), base + offset, nbytes, stream)
    device.copy(base, device.address(bounce), nbytes, stream)
    return [bounce]


def copy_of(ctx, stream, buf) -> tuple[int, list]:
    """A scratch copy of ``buf`` (for in-place exchanges): its address and the scratch."""
    scratch = ctx.device.empty(buf.nbytes, stream)
    address = ctx.device.address(scratch)
    ctx.device.copy(address, buf.ptr, buf.nbytes, stream)
    return address, [scratch]
