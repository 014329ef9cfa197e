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

from .core import trace
from .core.errors import CommunicatorError

_lock = threading.Lock()
_state = "uninitialized"            # -> "initialized" -> "finalized"
_world = None   # the default group's mpi4py communicator, once initialized
# Creation order: freeing shared windows is collective, so every rank must free its
# communicators in the same (creation) order or finalize can deadlock.
_communicators: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_created = itertools.count()


def init(mpi_comm=None) -> None:
    """Initialize aluminum (idempotent).  ``mpi_comm`` becomes the default communicator group
    (``COMM_WORLD`` if omitted).  Raises ``CommunicatorError`` after ``finalize``."""
    global _state, _world
    with _lock:
        if _state == "finalized":
            raise CommunicatorError("al.init: aluminum was finalized; it cannot be re-initialized")
        if _state == "initialized":
            return
        # Importing mpi4py.MPI initializes MPI, so ``import aluminum`` starts none; a program
        # that imported mpi4py.MPI itself first keeps its own settings.
        import mpi4py

        mpi4py.rc.thread_level = "multiple"
        from mpi4py import MPI

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


def ensure_initialized():
    """The default MPI communicator, initializing on first use; raises after ``finalize``."""
    if _state != "initialized":
        init()
    return _world


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
    from .engine import progress

    progress.finalize_engine()
    trace.write()
    for _, comm in sorted(_communicators.items(), key=lambda item: item[0]):
        comm.free()
