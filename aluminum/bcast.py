"""Broadcast: every rank's buffer gets a copy of the root's."""
from __future__ import annotations

from . import dispatch, selector
from .validate import check_comm, check_stream, input_buffer, output_buffer, rank_in_range

__all__ = ["bcast", "nonblocking_bcast"]


def bcast(buf, comm, stream=None, *, root: int = 0, algo: str = "automatic") -> None:
    """Copy the root's ``buf`` into ``buf`` on every other rank (always in place).

    ``buf`` must have the same count and dtype on every rank; the root's is only read (it
    may be read-only), every other rank's is overwritten.  Blocking: returns when this
    rank's part is done; on stream-bound backends, once the work is enqueued on ``stream``.
    """
    _bcast(True, buf, comm, stream, root, algo)


def nonblocking_bcast(buf, comm, stream=None, *, root: int = 0, algo: str = "automatic"):
    """Start ``bcast`` and return a ``Request``; ``buf`` must not be touched until it
    completes."""
    return _bcast(False, buf, comm, stream, root, algo)


def _bcast(blocking, buf, comm, stream, root, algo):
    comm = check_comm(comm)
    root = rank_in_range(root, comm, "root")
    check = input_buffer if comm.rank == root else output_buffer
    buf = check(buf, comm, "buf")
    stream = check_stream(stream, comm)
    state_class = selector.choose(comm, "bcast", algo, buf.nbytes)
    return dispatch.run(comm, "bcast", state_class, buf.nbytes, blocking, (stream, buf, root))
