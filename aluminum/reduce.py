"""Reduce: the root gets the element-wise reduction of every rank's buffer."""
from __future__ import annotations

from .plan import Plan
from .recall import call_blocking, call_nonblocking
from .core.reduction import ReductionOp
from .validate import (check_comm, check_stream, expect_count, in_place_or_pair, input_buffer,
                       rank_in_range, reduction_op)

__all__ = ["reduce", "nonblocking_reduce", "reduce_init"]


def reduce(buf, comm, stream=None, *, root: int = 0, op=ReductionOp.SUM, recvbuf=None,
           algo: str = "automatic") -> None:
    """Reduce ``buf`` element-wise across all ranks of ``comm`` into the root's buffer.

    At the root the result overwrites ``buf`` (in place) unless ``recvbuf`` is given, in
    which case ``buf`` is only read and ``recvbuf`` (same count and dtype) gets the result.
    On every other rank ``buf`` is only read and ``recvbuf`` is ignored (it may be None).
    Blocking: returns when the result is at the root (this rank's part is done elsewhere);
    on stream-bound backends, once the work is enqueued on ``stream``.
    """
    call_blocking("reduce", (buf, recvbuf), comm, stream, (root, op, algo),
                  _reduce, buf, comm, stream, root, op, recvbuf, algo)


def nonblocking_reduce(buf, comm, stream=None, *, root: int = 0, op=ReductionOp.SUM,
                       recvbuf=None, algo: str = "automatic"):
    """Start ``reduce`` and return a ``Request``; buffers must not be touched until it
    completes."""
    return call_nonblocking("reduce", (buf, recvbuf), comm, stream, (root, op, algo),
                            _reduce, buf, comm, stream, root, op, recvbuf, algo)


def reduce_init(buf, comm, stream=None, *, root: int = 0, op=ReductionOp.SUM, recvbuf=None,
           algo: str = "automatic") -> Plan:
    """Validate ``reduce`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _reduce(buf, comm, stream, root, op, recvbuf, algo).prepare()


def _reduce(buf, comm, stream, root, op, recvbuf, algo):
    comm = check_comm(comm)
    root = rank_in_range(root, comm, "root")
    if comm.rank != root:
        sendbuf, recvbuf = input_buffer(buf, comm, "buf"), None
    else:
        sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
        expect_count(recvbuf, sendbuf.count, sendbuf.dtype, "recvbuf")
    op = reduction_op(op, sendbuf.dtype)
    stream = check_stream(stream, comm)
    return Plan(comm, "reduce", algo, sendbuf.nbytes, (stream, sendbuf, recvbuf, op, root))
