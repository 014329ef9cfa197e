"""What every host-transfer operation shares: stage to host memory, run MPI there, unstage.

Aluminum's HT states, one pattern for all 18 operations.  The operation's constructor runs on
the calling thread and enqueues on its stream:

1. D2H copies of the buffers MPI reads into host staging buffers (``staged(..., d2h=...)``),
2. the *ready* event,
3. a wait on a host flag,
4. H2D copies of the staged results into the user's buffers (``staged(..., h2d=...)``),
5. the *done* event.

The progress engine then steps it: poll *ready* → post the MPI operation on the staging
buffers → poll it → set the flag (the stream resumes and copies the results back) → poll
*done* → complete.  The MPI operation is the MPI backend's State for the same op, built over
the staging buffers with the algorithm the MPI backend's selector picks for that size and
placement (its passthrough, or e.g. ``shared_memory`` for a large allreduce on one node:
``backends.selected_state``, the API's selector), so datatypes,
half-precision reductions, AVG and the 0/1 of logical ops are exactly the MPI backend's
(``op.finish`` runs on the host staging buffer, before the H2D copy).

Variants fall out of what an operation stages:

- Nothing copied in (recv; bcast and scatter off the root): no *ready* event, MPI is posted
  at once; the staging buffer is private, so nothing on the stream can race with it.
- Nothing copied back (send; reduce and gather off the root; bcast at the root): no flag, the
  stream never waits for MPI (Aluminum's early release of rooted operations); the operation
  completes when MPI does.
- Barrier: no copies, but both: the stream reaches the barrier, then waits for every rank.

Host buffers (numpy, torch CPU...) need no staging where the operation holds its stream
anyway (it writes something back): ``staged`` then hands them to MPI as they are, and the
operation waits for its stream before posting (MPI reads and writes the user's memory while the
stream is parked).  Copying host memory into host memory only costs: in one run here a 4 MiB
allreduce took 1.4 ms unstaged against 3.3 ms staged (MPI alone: 1.0 ms).  Where the operation
releases its stream early (send; reduce and gather off the root; bcast at the root), its host
inputs are still copied: only a snapshot lets the stream reuse them while MPI still reads, and
holding the stream instead could deadlock programs that are correct under Aluminum's
semantics (two ranks that each send, then receive, on one stream).  Outputs must therefore be
staged before inputs (``staged_pair`` does).  A communicator built with ``AL_HT_STAGE_HOST=1``
in the environment stages host buffers exactly as device buffers, so the device path's copies
run (and are tested) on machines without a GPU.

Blocking calls are stream-ordered: ``run_blocking`` builds the state (enqueuing the stream
work) and submits it to the engine without waiting; ``stream.synchronize()`` makes the result
visible.  A communicator whose ``blocking_mode`` is ``"host"`` (``AL_HT_BLOCKING=host``) runs
its blocking calls on the calling thread instead, as gloo runs CUDA tensors: it waits for
the stream to reach the call (the *ready* event), runs MPI as a blocking MPI call would, and
only then enqueues the copies back.  No stream ever parks on a flag and no thread hands the
operation over, which costs several times the copies when ranks share a GPU; the price is a
host that waits for its stream at every blocking call.  A nonblocking call's
``Request.wait()`` blocks the host until *done*; ``Request.wait_on_stream(s)`` makes ``s``
wait on *done* (or, for operations that never hold their stream, on *ready*: the stream may
reuse the buffers once they were copied out).

MPI requires every rank to post one communicator's collectives in the same order (MPI's own
collectives match by posting order; only the custom algorithms tag their messages).  States on
different streams see their *ready* events in any order, so each takes a ticket in issue
order from its communicator (``PostingOrder``) and posts only when all earlier ones did.

A failing MPI step still sets the flag (a stream never hangs on a failed operation), fails
the request, and on host streams re-raises from the stream's next ``synchronize()``; what the
H2D copy then writes is undefined.  A blocking call whose failure no stream can report (CUDA
streams; operations that never hold their stream) warns instead.  Operations still pending
when ``al.finalize()`` gives up on them (``abandon``) fail the same way, so their streams
do not stay parked.
"""
from __future__ import annotations

import itertools
import os
import warnings

import numpy as np

from ...core.buffers import CUDA, HOST, Buffer
from ...engine.progress import drive_until, submit
from ...engine.state import Action, State
from ...core.errors import ArgumentError, BufferError
from .. import BLOCKING_MODE_KEY, selected_state
from ..runtime import drive_while_waiting, host, runtime_for
from .staging import region, staging_pool

__all__ = ["HostTransferState", "PostingOrder", "STAGE_HOST_KEY", "layout_blocks"]

_CONTINUE, _COMPLETE = Action.CONTINUE, Action.COMPLETE
_yield = os.sched_yield
_HOST_RUNTIME = host.RUNTIME
STAGE_HOST_KEY = "ht_stage_host"   # comm.scratch: stage host buffers too (AL_HT_STAGE_HOST)

# A thread synchronizing a stream that waits on an HT flag drives the MPI step itself.
drive_while_waiting(drive_until)


class PostingOrder:
    """One communicator's MPI posting order: tickets are issued on the calling thread in call
    order (the same on every rank) and redeemed on the engine, one at a time, in that order."""

    __slots__ = ("_issued", "posted")

    def __init__(self) -> None:
        self._issued = itertools.count()
        self.posted = 0   # tickets redeemed so far; only the engine's driver writes it

    def ticket(self) -> int:
        return next(self._issued)

    @staticmethod
    def of(comm) -> PostingOrder:
        return comm.scratch("ht_order", PostingOrder)


class HostTransferState(State):
    """Base of the host-transfer states: subclasses stage their buffers with ``staged`` and
    ``staged_pair``, then ``launch`` the MPI backend's State over the staged copies."""

    # Set (before __init__) by run_blocking on a communicator whose blocking_mode is "host":
    # launch then enqueues only what precedes MPI, and run_on_caller does the rest.
    on_caller = False

    def __init__(self, comm, stream) -> None:
        self.comm = comm
        if stream is None:
            stream = comm.stream
        if type(stream) is host.HostStream:
            self.runtime = _HOST_RUNTIME
        else:
            try:
                self.runtime = runtime_for(stream)
                stream = self.runtime.as_stream(stream)
            except TypeError as exc:
                raise ArgumentError(str(exc)) from None
        self.compute_stream = stream
        self.stage_host = bool(comm.scratch(STAGE_HOST_KEY))
        self.pool = None   # the communicator's StagingPool, once something is staged
        self.mpi: State | None = None
        self.ready = self.done = self.flag = None
        self.error: BaseException | None = None
        self.blocking = False
        self._d2h: list[tuple[object, object]] = []   # (staging, user region)
        self._h2d: list[tuple[object, object]] = []   # (user region, staging)
        self._raws: list[np.ndarray] = []
        self._reads = self._writes = self._direct = False
        self._posted = self._mpi_done = False
        self._order = self._ticket = None

    # -- building (calling thread) -----------------------------------------------------------

    def staged(self, buf: Buffer, *, d2h=True, h2d=False) -> Buffer:
        """A host staging buffer standing in for ``buf`` in the MPI operation, or ``buf``
        itself: host memory of an operation that holds its stream (this buffer or one staged
        before it is copied back), unless the communicator stages host buffers too.

        ``d2h``: copy ``buf`` into it before MPI runs: True for all of it, or a list of
        ``(start, count)`` element blocks.  ``h2d``: copy it back into ``buf`` after MPI
        (True or blocks), e.g. only the blocks a v-variant writes, so the rest of ``buf`` is
        never touched.
        """
        if buf.device == HOST and not self.stage_host and (h2d or self._writes):
            self._direct = True
            self._writes = True
            return buf
        if buf.device == CUDA and self.runtime is _HOST_RUNTIME:
            raise BufferError(f"stream: expected a CUDA stream for a CUDA device buffer "
                              f"({buf.describe()}), got host stream "
                              f"{self.compute_stream.name}; pass stream= a CUDA stream or bind "
                              f"one with comm.copy(stream)")
        if buf.count:
            if self.pool is None:
                self.pool = staging_pool(self.comm)
            raw, view = self.pool.take(self.runtime, buf.dtype, buf.count)
            self._raws.append(raw)
        else:
            view = np.empty(0, buf.dtype)
        if d2h:
            self._reads = True
            self._d2h += _pieces(view, buf, d2h)
        if h2d:
            self._writes = True
            self._h2d += [(user, staging) for staging, user in _pieces(view, buf, h2d)]
        return Buffer(view, view, None, buf.dtype, buf.count, HOST, True)

    def staged_pair(self, sendbuf: Buffer, recvbuf: Buffer, *, d2h_in_place=True,
                    h2d=True) -> tuple[Buffer, Buffer]:
        """Staging for an operation in place when ``sendbuf is recvbuf``: identity is kept
        (so the MPI backend passes ``MPI_IN_PLACE``).  In place, ``d2h_in_place`` says what of
        the buffer is input (True or blocks); ``h2d`` what of ``recvbuf`` is output."""
        if sendbuf is recvbuf:
            staged = self.staged(recvbuf, d2h=d2h_in_place, h2d=h2d)
            return staged, staged
        staged_recv = self.staged(recvbuf, d2h=False, h2d=h2d)
        return self.staged(sendbuf), staged_recv

    def launch(self, op: str, *mpi_args, wait_for_stream: bool | None = None,
               hold_stream: bool | None = None) -> None:
        """Enqueue the stream side of the operation; in between, the engine runs ``op`` on
        the staged buffers (``mpi_args``: the MPI backend's State arguments after ``stream``)
        with the algorithm the MPI backend's selector picks for the largest staged buffer
        and the call's placement (Aluminum's HT backend always calls the MPI library's own).

        By default the engine waits for the stream (the *ready* event) when something is
        copied in, and the stream waits for MPI (the flag) when something is copied back; an
        operation on unstaged host memory always does both.
        """
        stream = self.compute_stream
        if getattr(stream, "closed", False):
            raise ArgumentError(f"stream: {stream!r} is closed")
        staged = [arg for arg in mpi_args if type(arg) is Buffer]
        nbytes = max((buf.count * buf.dtype.itemsize for buf in staged), default=0)
        inplace = len(staged) > 1 and staged[0] is staged[1]
        algorithm = selected_state(self.comm, "mpi", op, nbytes, inplace)
        self.mpi = algorithm(self.comm, None, *mpi_args)
        if self._direct:   # MPI will touch the user's memory: not before the stream gets here
            wait_for_stream = True
        wait_for_stream = self._reads if wait_for_stream is None else wait_for_stream
        hold_stream = self._writes if hold_stream is None else hold_stream
        copy = self.runtime.copy_async
        for staging, user in self._d2h:
            copy(staging, user, stream)
        if self.on_caller:   # the caller waits for the stream itself, whatever it reads
            wait_for_stream, hold_stream = True, False
        # On an idle host stream there is nothing for MPI to wait for (a CUDA stream is
        # never asked: the event is what orders the device).
        if wait_for_stream and not (self.runtime is _HOST_RUNTIME and stream.query()):
            self.ready = stream.record_event()
        if hold_stream:
            self.flag = self.runtime.new_flag()
            try:
                stream.wait_flag(self.flag)
                if self.runtime is _HOST_RUNTIME:
                    stream.enqueue_instant(self._raise_on_stream)
                for user, staging in self._h2d:
                    copy(user, staging, stream)
                self.done = stream.record_event()
            except BaseException:
                self.flag.set()   # never leave the stream parked on a flag nobody sets
                raise
        self._order = PostingOrder.of(self.comm)
        self._ticket = self._order.ticket()

    @classmethod
    def run_blocking(cls, *args) -> None:
        """Stream-ordered blocking call: enqueue the stream work, hand the MPI part to the
        progress engine, return without waiting (``stream.synchronize()`` waits).  On a
        communicator whose ``blocking_mode`` is ``"host"``: ``run_on_caller``.

        Nobody waits for the request: on a CUDA stream the engine thread must run it (it is
        woken for it); a host stream's ``synchronize()`` drives it itself."""
        comm = args[0]
        if comm.scratch(BLOCKING_MODE_KEY) == "host":
            state = cls.__new__(cls)
            state.on_caller = True
            state.__init__(*args)
            state.run_on_caller()
            return
        state = cls(*args)
        state.blocking = True
        submit(state, background=state.runtime is not _HOST_RUNTIME)

    def run_on_caller(self) -> None:
        """The blocking call of ``blocking_mode="host"``, on this thread: wait until the
        stream has staged the inputs, post MPI in the communicator's posting order, wait for
        it (through the engine, so ``AL_TIMEOUT`` ends a stuck one), then enqueue the copies
        back.  A failure raises here, before anything is copied into the user's buffers."""
        order = self._order
        try:
            if self.ready is not None:
                self.ready.synchronize()
            while order.posted != self._ticket:   # earlier operations post first
                drive_until(lambda: order.posted == self._ticket, None)
                _yield()
        except BaseException as exc:
            self._fail(exc)
            raise
        self._posted = True
        order.posted += 1
        try:
            submit(self.mpi).wait()
        except BaseException:
            if self._raws:   # the stream has passed its copies out (ready)
                self.pool.give_back(self._raws, self.runtime)
            raise
        copy, stream = self.runtime.copy_async, self.compute_stream
        for user, staging in self._h2d:
            copy(user, staging, stream)
        if self._raws:
            if self._h2d:
                self.pool.give_back_after(stream.record_event(), self._raws, self.runtime)
            else:
                self.pool.give_back(self._raws, self.runtime)

    def completion_event(self):
        """*done* when the stream waits for MPI, else *ready* (its buffers were copied out)."""
        return self.done if self.done is not None else self.ready

    # -- progress (engine) -------------------------------------------------------------------

    def start(self) -> None:
        try:
            self._post()
        except BaseException as exc:
            self._fail(exc)
            raise

    def step(self) -> Action:
        try:
            if not self._posted and not self._post():
                return _CONTINUE
            if not self._mpi_done:
                if self.mpi.step() is not _COMPLETE:
                    return _CONTINUE
                self._mpi_done = True
                if self.flag is not None:
                    self.flag.set()
            if self.done is not None and not self.done.query():
                return _CONTINUE
        except BaseException as exc:
            self._fail(exc)
            raise
        if self._raws:
            self.pool.give_back(self._raws, self.runtime)
        return _COMPLETE

    def _post(self) -> bool:
        """Post the MPI operation once the stream has staged its inputs and every earlier
        operation of the communicator has posted; True once posted."""
        if self.ready is not None and not self.ready.query():
            return False
        if self._order.posted != self._ticket:
            return False
        self._posted = True
        self._order.posted += 1
        self.mpi.start()
        return True

    def abandon(self, error: BaseException) -> None:
        """Finalize gave up on this operation: release its stream (see ``_fail``)."""
        if self.error is None:
            self._fail(error)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        if not self._posted:   # let later operations of the communicator post
            self._posted = True
            self._order.posted += 1
        if self.flag is not None:
            self.flag.set()
        last = self.done if self.done is not None else self.ready
        if last is not None and self._raws:
            self.pool.give_back_after(last, self._raws, self.runtime)
        if self.blocking and not (self.flag is not None and self.runtime is _HOST_RUNTIME):
            warnings.warn(f"aluminum: blocking {self.name} failed on the progress engine: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)

    def _raise_on_stream(self) -> None:
        # Runs on the host stream right after the flag: a failed operation fails the stream.
        if self.error is not None:
            raise self.error


def _pieces(staging: np.ndarray, buf: Buffer, blocks) -> list[tuple[object, object]]:
    """``(staging part, user part)`` pairs to copy: all of ``buf`` when ``blocks`` is True,
    else each non-empty ``(start, count)`` block."""
    if blocks is True:
        if not buf.count:
            return []
        return [(staging, buf.array if buf.device == HOST else region(buf, 0, buf.count))]
    return [(staging[s:s + n], region(buf, s, n)) for s, n in blocks if n]


def layout_blocks(counts, displs) -> list[tuple[int, int]]:
    """The ``(start, count)`` element blocks of a v-variant layout, sorted, adjacent ones
    merged (packed layouts become one copy)."""
    merged: list[list[int]] = []
    for start, count in sorted((d, c) for c, d in zip(counts, displs) if c):
        if merged and merged[-1][0] + merged[-1][1] >= start:
            end = max(merged[-1][0] + merged[-1][1], start + count)
            merged[-1][1] = end - merged[-1][0]
        else:
            merged.append([start, count])
    return [(start, count) for start, count in merged]
