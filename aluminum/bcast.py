"""Broadcast: every rank's buffer gets a copy of the root's."""
from __future__ import annotations

from .plan import Plan
from .recall import call_blocking, call_nonblocking
from .validate import check_comm, check_stream, input_buffer, output_buffer, rank_in_range

__all__ = ["bcast", "nonblocking_bcast", "bcast_init"]


def bcast(buf, comm, stream=None, *, root: int = 0, algo: str = "automatic") -> None:
    """Copy the root's ``buf`` into ``buf`` on every other rank (always in place).

    ``buf`` must have the same count and dtype on every rank; the root's is only read (it
    may be read-only), every other rank's is overwritten.  Blocking: returns when this
    rank's part is done; on stream-bound backends, once the work is enqueued on ``stream``.
    """
    call_blocking("bcast", (buf,), comm, stream, (root, algo),
                  _bcast, buf, comm, stream, root, algo)


def nonblocking_bcast(buf, comm, stream=None, *, root: int = 0, algo: str = "automatic"):
    """Start ``bcast`` and return a ``Request``; ``buf`` must not be touched until it
    completes."""
    return call_nonblocking("bcast", (buf,), comm, stream, (root, algo),
                            _bcast, buf, comm, stream, root, algo)


def bcast_init(buf, comm, stream=None, *, root: int = 0, algo: str = "automatic") -> Plan:
    """Validate ``bcast`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _bcast(buf, comm, stream, root, algo).prepare()


def _bcast(buf, comm, stream, root, algo):
    comm = check_comm(comm)
    root = rank_in_range(root, comm, "root")
    check = input_buffer if comm.rank == root else output_buffer
    buf = check(buf, comm, "buf")
    stream = check_stream(stream, comm)
    return Plan(comm, "bcast", algo, buf.nbytes, (stream, buf, root))
