"""Library lifetime: ``init``, ``finalize``, ``initialized``.

``init`` is idempotent and happens implicitly when the first communicator is built.  MPI is
initialized by mpi4py with ``MPI_THREAD_MULTIPLE`` (the progress engine calls MPI from its own
thread).  ``finalize`` waits for in-flight operations (bounded by ``AL_TIMEOUT``), stops the
engine and frees every live communicator; it does not finalize MPI, which mpi4py does at exit,
so the user's own mpi4py code keeps working.  It also runs at interpreter exit.
"""
from __future__ import annotations

import atexit
import itertools
import threading
import weakref

import mpi4py

mpi4py.rc.thread_level = "multiple"
from mpi4py import MPI  # noqa: E402  (rc must be set first)

from .errors import CommunicatorError  # noqa: E402

_lock = threading.Lock()
_state = "uninitialized"            # -> "initialized" -> "finalized"
_world: MPI.Comm | None = None
# Creation order: freeing shared windows is collective, so every rank must free its
# communicators in the same (creation) order or finalize can deadlock.
_communicators: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_created = itertools.count()
_finalize_hooks: list = []


def init(mpi_comm: MPI.Comm | None = None) -> None:
    """Initialize aluminum (idempotent).  ``mpi_comm`` becomes the default communicator group
    (``COMM_WORLD`` if omitted).  Raises ``CommunicatorError`` after ``finalize``."""
    global _state, _world
    with _lock:
        if _state == "finalized":
            raise CommunicatorError("al.init: aluminum was finalized; it cannot be re-initialized")
        if _state == "initialized":
            return
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            import warnings

            warnings.warn("aluminum: MPI was initialized without MPI_THREAD_MULTIPLE; "
                          "nonblocking operations may be unsafe", RuntimeWarning, stacklevel=2)
        _world = mpi_comm if mpi_comm is not None else MPI.COMM_WORLD
        _state = "initialized"
        atexit.register(finalize)


def initialized() -> bool:
    """True between ``init`` and ``finalize``."""
    return _state == "initialized"


def finalized() -> bool:
    return _state == "finalized"


def ensure_initialized() -> MPI.Comm:
    """The default MPI communicator, initializing on first use; raises after ``finalize``."""
    if _state != "initialized":
        init()
    return _world


def at_finalize(hook) -> None:
    """Register ``hook()`` to run first in ``finalize`` (the engine uses it to drain and stop)."""
    _finalize_hooks.append(hook)


def register_communicator(comm) -> None:
    _communicators[next(_created)] = comm


def finalize() -> None:
    """Complete or fail in-flight operations, stop the engine and free all communicators."""
    global _state
    with _lock:
        was_initialized = _state == "initialized"
        _state = "finalized"
    if not was_initialized:
        return
    for hook in _finalize_hooks:
        hook()
    for _, comm in sorted(_communicators.items(), key=lambda item: item[0]):
        comm.free()
