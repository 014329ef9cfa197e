"""Barrier: no rank leaves until every rank of the communicator has entered."""
from __future__ import annotations

from . import dispatch, selector
from .validate import check_comm, check_stream

__all__ = ["barrier", "nonblocking_barrier"]


def barrier(comm, stream=None, *, algo: str = "automatic") -> None:
    """Wait until every rank of ``comm`` has called ``barrier``.

    On the MPI backend the call blocks the host; on stream-bound backends it is enqueued on
    ``stream`` (default: the communicator's) and orders that stream's later work after it.
    """
    _barrier(True, comm, stream, algo)


def nonblocking_barrier(comm, stream=None, *, algo: str = "automatic"):
    """Enter the barrier and return a ``Request`` that completes once every rank entered."""
    return _barrier(False, comm, stream, algo)


def _barrier(blocking, comm, stream, algo):
    comm = check_comm(comm)
    stream = check_stream(stream, comm)
    state_class = selector.choose(comm, "barrier", algo, 0)
    return dispatch.run(comm, "barrier", state_class, 0, blocking, (stream,))
