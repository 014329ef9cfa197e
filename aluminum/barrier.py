"""Barrier: no rank leaves until every rank of the communicator has entered."""
from __future__ import annotations

from .plan import Plan
from .recall import call_blocking, call_nonblocking
from .validate import check_comm, check_stream

__all__ = ["barrier", "nonblocking_barrier", "barrier_init"]


def barrier(comm, stream=None, *, algo: str = "automatic") -> None:
    """Wait until every rank of ``comm`` has called ``barrier``.

    On the MPI backend the call blocks the host; on stream-bound backends it is enqueued on
    ``stream`` (default: the communicator's) and orders that stream's later work after it.
    """
    call_blocking("barrier", (), comm, stream, (algo,),
                  _barrier, comm, stream, algo)


def nonblocking_barrier(comm, stream=None, *, algo: str = "automatic"):
    """Enter the barrier and return a ``Request`` that completes once every rank entered."""
    return call_nonblocking("barrier", (), comm, stream, (algo,),
                            _barrier, comm, stream, algo)


def barrier_init(comm, stream=None, *, algo: str = "automatic") -> Plan:
    """Validate ``barrier`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _barrier(comm, stream, algo).prepare()


def _barrier(comm, stream, algo):
    comm = check_comm(comm)
    stream = check_stream(stream, comm)
    return Plan(comm, "barrier", algo, 0, (stream,))
