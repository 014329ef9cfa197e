"""Reduce-scatter: reduce every rank's buffer element-wise, then rank ``r`` keeps block ``r``."""
from __future__ import annotations

from .plan import Plan
from .recall import layout, call_blocking, call_nonblocking
from .core.reduction import ReductionOp
from .validate import (block_count, check_comm, check_stream, counts_arg, expect_count,
                       in_place_or_pair, reduction_op)

__all__ = ["reduce_scatter", "nonblocking_reduce_scatter", "reduce_scatterv",
           "nonblocking_reduce_scatterv", "reduce_scatter_init", "reduce_scatterv_init"]


def reduce_scatter(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                   algo: str = "automatic") -> None:
    """Reduce ``buf`` (``comm.size * n`` elements) across ranks; rank ``r`` gets block ``r``.

    Block ``r`` is the ``n`` elements at offset ``r * n``.  In place (``recvbuf`` None) this
    rank's reduced block overwrites the first ``n`` elements of ``buf`` and the rest of
    ``buf`` is unspecified (MPI's in-place semantics); otherwise ``buf`` is only read and
    ``recvbuf`` (``n`` elements, same dtype) gets the block.  Blocking: returns when the
    result is in place; on stream-bound backends, once the work is enqueued on ``stream``.
    """
    call_blocking("reduce_scatter", (buf, recvbuf), comm, stream, (op, algo),
                  _reduce_scatter, buf, comm, stream, op, recvbuf, algo)


def nonblocking_reduce_scatter(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                               algo: str = "automatic"):
    """Start ``reduce_scatter`` and return a ``Request``; buffers must not be touched until
    it completes."""
    return call_nonblocking("reduce_scatter", (buf, recvbuf), comm, stream, (op, algo),
                            _reduce_scatter, buf, comm, stream, op, recvbuf, algo)


def reduce_scatter_init(buf, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                   algo: str = "automatic") -> Plan:
    """Validate ``reduce_scatter`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _reduce_scatter(buf, comm, stream, op, recvbuf, algo).prepare()


def reduce_scatterv(buf, counts, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                    algo: str = "automatic") -> None:
    """Reduce-scatter with per-rank block sizes: rank ``r`` gets ``counts[r]`` elements.

    ``counts`` (element counts, one per rank, identical on every rank) splits ``buf``
    (exactly ``sum(counts)`` elements) into consecutive blocks in rank order.  In place this
    rank's reduced block overwrites the first ``counts[rank]`` elements of ``buf`` (the rest
    is unspecified); otherwise ``recvbuf`` (exactly ``counts[rank]`` elements) gets it.
    Blocking as ``reduce_scatter``.
    """
    call_blocking("reduce_scatterv", (buf, recvbuf), comm, stream, (op, algo, layout(counts)),
                  _reduce_scatterv, buf, counts, comm, stream, op, recvbuf, algo)


def nonblocking_reduce_scatterv(buf, counts, comm, stream=None, *, op=ReductionOp.SUM,
                                recvbuf=None, algo: str = "automatic"):
    """Start ``reduce_scatterv`` and return a ``Request``."""
    return call_nonblocking("reduce_scatterv", (buf, recvbuf), comm, stream,
                            (op, algo, layout(counts)),
                            _reduce_scatterv, buf, counts, comm, stream, op, recvbuf, algo)


def reduce_scatterv_init(buf, counts, comm, stream=None, *, op=ReductionOp.SUM, recvbuf=None,
                    algo: str = "automatic") -> Plan:
    """Validate ``reduce_scatterv`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _reduce_scatterv(buf, counts, comm, stream, op, recvbuf, algo).prepare()


def _reduce_scatter(buf, comm, stream, op, recvbuf, algo):
    comm = check_comm(comm)
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    count = block_count(sendbuf, comm, "buf")
    if sendbuf is not recvbuf:
        expect_count(recvbuf, count, sendbuf.dtype, "recvbuf")
    op = reduction_op(op, sendbuf.dtype)
    stream = check_stream(stream, comm)
    return Plan(comm, "reduce_scatter", algo, sendbuf.nbytes, (stream, sendbuf, recvbuf, op))


def _reduce_scatterv(buf, counts, comm, stream, op, recvbuf, algo):
    comm = check_comm(comm)
    counts = counts_arg(counts, comm, "counts")
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    expect_count(sendbuf, sum(counts), sendbuf.dtype, "buf")
    if sendbuf is not recvbuf:
        expect_count(recvbuf, counts[comm.rank], sendbuf.dtype, "recvbuf")
    op = reduction_op(op, sendbuf.dtype)
    stream = check_stream(stream, comm)
    return Plan(comm, "reduce_scatterv", algo, sendbuf.nbytes,
                (stream, sendbuf, recvbuf, op, counts))
