"""Communicators: a process group bound to a backend (and, for GPU backends, a stream).

The backend's services (``aluminum.backends.Services``; MPI's for every backend today) make
the group: each communicator duplicates its MPI communicator, so aluminum's traffic never
mixes with the user's, twice (the second carries only ``split``/``copy``, never operations
in flight), and splits a node-local one for ``local_rank``/``local_size``.  Custom
algorithms tag their messages with a per-communicator sequence number (``next_tag``): every
rank issues collectives in the same order, so concurrent operations never match each other's
messages.  (The direct reduce sends under one fixed tag instead, above these: its messages
match by their order alone, so that a plan can bind them once.)
"""
from __future__ import annotations

import itertools
import weakref

from . import runtime, watchdog
from .backends import BLOCKING_MODE_KEY, BLOCKING_MODES, get_backend, get_services
from .core.errors import ArgumentError, CommunicatorError, TimeoutError
from .engine import progress
from .engine.scheduler import describe

# Tags cycle below the MPI-guaranteed minimum of MPI_TAG_UB (32767); tag 0 is left for
# Aluminum-style untagged point-to-point.
_TAG_SPAN = 32000
# MPI objects of communicators freed while operations on them were abandoned: their MPI
# requests may still be pending, and freeing the objects under them crashes Open MPI.
_kept: list = []


class Communicator:
    """Base class: group bookkeeping shared by every backend's communicator.  ``freed``
    becomes True when ``free()`` (or ``al.finalize()``) releases it; ``shares_buffers``
    when ``al.shared_empty`` first allocates on it (the selector's tables may choose
    otherwise for such communicators: their allreduces may run zero-copy); ``plans`` holds
    the plans made on it, weakly, and ``free()`` drops their prepared calls."""

    backend_name: str = ""

    def __init__(self, mpi_comm=None, stream=None):
        if not self.backend_name:
            raise CommunicatorError(
                f"{type(self).__name__}: the base class of communicators has no backend; "
                "make an al.MPICommunicator, al.HostTransferCommunicator or "
                "al.NCCLCommunicator")
        world = runtime.ensure_initialized()
        self.backend = get_backend(self.backend_name)
        self.services = get_services(self.backend.services)
        group = self.services.open_group(world if mpi_comm is None else mpi_comm,
                                         f"{type(self).__name__}()")
        self._mpi = group.ops
        self.freed = False
        # The plans made on it, told when it is freed (plans do not read ``freed`` per run).
        self.plans: weakref.WeakSet = weakref.WeakSet()
        self.shares_buffers = False
        self._admin, self._local = group.admin, group.local
        self.local_rank, self.local_size = group.local_rank, group.local_size
        self.rank, self.size = group.rank, group.size
        # Every rank knows every node's ranks, so node-aware algorithms need no agreement
        # per call.
        self.nodes: tuple[tuple[int, ...], ...] = group.nodes
        self.node_count = len(self.nodes)
        if stream is None and self.backend.default_stream is not None:
            stream = self.backend.default_stream()
        self._stream = stream
        self._tags = itertools.count(1)
        self._scratch: dict = {}
        self.arrivals = None   # watchdog.ArrivalCounters, made below
        self._index = runtime.register_communicator(self)
        # A communicator dropped without free() releases its MPI communicators when
        # collected; its collective resources (shared windows) wait for al.finalize().
        self._finalizer = weakref.finalize(self, _release_dropped, self.services, self._index,
                                           (self._mpi, self._admin, self._local),
                                           self._scratch)
        self._finalizer.atexit = False
        try:
            self.arrivals = watchdog.attach(self)   # (gives its slot back when collected)
            if self.backend.setup is not None:
                self.backend.setup(self)
        except BaseException:
            self.free()
            raise

    @property
    def stream(self):
        """The stream operations are ordered on when a call passes ``stream=None``."""
        return self._stream

    @property
    def mpi_comm(self):
        """The private duplicated MPI communicator (raises if the communicator was freed)."""
        if self._mpi is None:
            raise self.unusable_error()
        return self._mpi

    @property
    def local_comm(self):
        """The node-local MPI communicator (ranks sharing memory with this one)."""
        if self._mpi is None:
            raise self.unusable_error()
        return self._local

    def scratch(self, key: str, make=None):
        """The backend resource kept under ``key``, made by ``make()`` on first use (None
        when there is none and no ``make``); ``free()`` closes every one that has a
        ``close()``."""
        found = self._scratch.get(key)
        if found is None and make is not None:
            found = self._scratch[key] = make()
        return found

    def next_tag(self) -> int:
        """A fresh tag for one operation's messages; identical on every rank for the same op."""
        return 1 + next(self._tags) % _TAG_SPAN

    def unusable_error(self) -> CommunicatorError:
        if runtime.finalized():
            return CommunicatorError("comm: aluminum was finalized (al.finalize()); "
                                     "no communication is possible afterwards")
        return CommunicatorError(f"comm: this {type(self).__name__} was freed")

    def copy(self, stream=None, kind: "type[Communicator] | None" = None) -> "Communicator":
        """A communicator over the same group bound to ``stream``; collective.  Operations
        in flight on this one may go on meanwhile.

        ``kind`` (a ``Communicator`` subclass, default this one's) puts the copy on another
        backend: ``comm.copy(kind=al.NCCLCommunicator)`` is the GPU twin of a host
        communicator, same ranks in the same order."""
        self.mpi_comm   # (raises once freed)
        if kind is None:
            kind = type(self)
        elif not (isinstance(kind, type) and issubclass(kind, Communicator)):
            raise ArgumentError(f"kind: expected a Communicator subclass such as "
                                f"al.NCCLCommunicator, got {kind!r}")
        return kind(self._admin, stream=stream)

    def split(self, color: int | None, key: int = 0) -> "Communicator | None":
        """Split into sub-communicators of the same backend (``MPI_Comm_split``); collective.

        Ranks passing the same ``color`` (an int >= 0) form one communicator, ranked by
        ``key``, ties broken by rank in this one; ``color=None`` (``MPI_UNDEFINED``) takes
        part without joining any and returns None.  Operations in flight on this
        communicator may go on meanwhile.  A GPU backend's sub-communicator binds
        that backend's default stream and bootstraps over the split MPI communicator (the
        NCCL unique id goes over it).
        """
        if color is not None and (type(color) is not int or color < 0):
            raise ArgumentError(f"color: expected an int >= 0 or None, got {color!r}")
        if type(key) is not int:
            raise ArgumentError(f"key: expected an int, got {key!r}")
        self.mpi_comm   # (raises once freed)
        part = self.services.split(self._admin, color, key)
        if part is None:
            return None
        try:
            return type(self)(part)
        finally:
            self.services.free(part)   # the new communicator keeps its own duplicate

    def free(self) -> None:
        """Release the MPI resources (idempotent); later calls raise ``CommunicatorError``.

        Operations still in flight on this communicator are waited for first (at most
        ``AL_TIMEOUT``, else 30 s).  Those that do not finish fail with
        ``CommunicatorError``, and so does this call, naming how many; their MPI requests
        are then still pending, so the MPI objects are kept until exit instead of being
        freed under them (Open MPI would progress a freed communicator and crash).
        Collective: every rank must free it (the ranks of a node agree, within twice that
        bound, whether their shared windows can be closed; a rank that does not come makes
        this raise ``al.TimeoutError`` and the windows are kept).
        """
        if self._mpi is None:
            return
        bound = progress.finalize_timeout()
        failed = progress.drain(
            lambda state: getattr(state, "comm", None) is self, bound,
            lambda request: CommunicatorError(
                f"{describe(request)}: comm.free() was called while it was in flight, and it "
                f"did not complete within {bound:g} s"))
        keep = bool(failed) or progress.abandoned_owner(self)
        try:
            # On the node-local communicator, which carries no user operations (they would
            # match this): the windows to close are node-local too.  Peers may spend
            # ``bound`` draining their own operations first.
            everyone = self.services.agree(self._local, "comm.free()", 0 if keep else 1,
                                        timeout=2 * bound)
        except TimeoutError:
            self._release(collective=False, keep=True)
            raise
        self._release(collective=everyone == 1, keep=keep)
        if failed:
            raise CommunicatorError(
                f"comm.free(): {failed} operation(s) on this communicator were still in "
                f"flight after {bound:g} s and were failed; its MPI resources are kept "
                f"until exit, since MPI may still be progressing them")

    def _release(self, collective: bool, keep: bool) -> None:
        """Mark the communicator freed and release its resources: none when ``keep`` (MPI
        may still progress abandoned operations on them), the MPI communicators only unless
        ``collective`` (every rank agreed to close the shared windows too)."""
        mpi, self._mpi = self._mpi, None
        if mpi is None:
            return
        self.freed = True
        while self.plans:   # (no name left holding the last plan and its buffers)
            self.plans.pop().communicator_freed()
        from . import recall

        recall.forget(self)   # remembered plans hold buffers (al.shared_empty's among them)
        self._finalizer.detach()
        if self.arrivals is not None:
            self.arrivals.release()
        services = self.services
        if keep or services.stranded(mpi) or services.stranded(self._local):
            _kept.append((mpi, self._admin, self._local, dict(self._scratch)))
            self._scratch.clear()
            return
        if collective:
            _close_scratch(self._scratch)
        else:
            _kept.append(dict(self._scratch))
            self._scratch.clear()
        services.free(self._local, self._admin, mpi)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self) -> str:
        state = "freed" if self._mpi is None else f"rank {self.rank} of {self.size}"
        return f"<{type(self).__name__} {state}>"


def _close_scratch(scratch: dict) -> None:
    """Close every scratch resource that has a ``close()`` (collective: shared windows)."""
    resources = list(scratch.values())
    scratch.clear()
    for resource in resources:
        close = getattr(resource, "close", None)
        if close is not None:
            close()


def _release_dropped(services, index: int, handles: tuple, scratch: dict) -> None:
    """Garbage collection of a communicator never freed: free its MPI communicators now
    (local in Open MPI) and hand its scratch resources to ``al.finalize()``, which closes them
    in creation order on every rank (closing a window is collective, and ranks collect
    garbage at different times).  Nothing to do once MPI or aluminum is finalized."""
    if services.stopped() or runtime.finalized():
        return
    if scratch:
        runtime.defer_close(index, lambda: _close_scratch(scratch))
    services.free(*handles)


class MPICommunicator(Communicator):
    """A communicator on the MPI backend (host buffers, no stream)."""

    backend_name = "mpi"


class HostTransferCommunicator(Communicator):
    """A communicator on the host-transfer backend: device (or host-stream) buffers staged
    through host memory and reduced by MPI, every step ordered on ``stream``."""

    backend_name = "ht"

    @property
    def blocking_mode(self) -> str:
        """How blocking calls wait: ``"stream"`` (Aluminum's: the call returns at once and
        the stream waits for MPI) or ``"host"`` (the calling thread waits for the stream to
        reach the call and for MPI, then enqueues the copies back: no stream waits on a
        host flag, much faster where ranks share a GPU; gloo's way with CUDA tensors).
        Nonblocking calls and plans are not affected.  Default: ``AL_HT_BLOCKING``, else
        ``"stream"``."""
        return self.scratch(BLOCKING_MODE_KEY)

    @blocking_mode.setter
    def blocking_mode(self, mode: str) -> None:
        if mode not in BLOCKING_MODES:
            raise ArgumentError(f"blocking_mode: expected one of "
                                f"{', '.join(map(repr, BLOCKING_MODES))}, got {mode!r}")
        self._scratch[BLOCKING_MODE_KEY] = mode


class NCCLCommunicator(Communicator):
    """A communicator on the NCCL backend (GPU buffers, ordered on ``stream``)."""

    backend_name = "nccl"
