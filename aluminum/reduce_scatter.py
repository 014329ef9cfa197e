"""Reduce-scatter: reduce every rank's buffer element-wise, then rank ``r`` keeps block ``r``."""
from __future__ import annotations

from .core.ops import OPS
from .forms import public_forms
from .validate import Checked, block_count, expect_count, in_place_or_pair, reduction_op

__all__ = ["reduce_scatter", "nonblocking_reduce_scatter", "reduce_scatterv",
           "nonblocking_reduce_scatterv", "reduce_scatter_init", "reduce_scatterv_init"]


def _reduce_scatter_checks(buf, comm, op, recvbuf) -> Checked:
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    count = block_count(sendbuf, comm, "buf")
    if sendbuf is not recvbuf:
        expect_count(recvbuf, count, sendbuf.dtype, "recvbuf")
    op = reduction_op(op, sendbuf.dtype)
    return Checked(sendbuf.nbytes, (sendbuf, recvbuf, op))


def _reduce_scatterv_checks(buf, counts, comm, op, recvbuf) -> Checked:
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    expect_count(sendbuf, sum(counts), sendbuf.dtype, "buf")
    if sendbuf is not recvbuf:
        expect_count(recvbuf, counts[comm.rank], sendbuf.dtype, "recvbuf")
    op = reduction_op(op, sendbuf.dtype)
    return Checked(sendbuf.nbytes, (sendbuf, recvbuf, op, counts))


reduce_scatter, nonblocking_reduce_scatter, reduce_scatter_init = public_forms(
    OPS["reduce_scatter"], _reduce_scatter_checks, __name__,
    doc="""Reduce ``buf`` (``comm.size * n`` elements) across ranks; rank ``r`` gets block ``r``.

    Block ``r`` is the ``n`` elements at offset ``r * n``.  In place (``recvbuf`` None) this
    rank's reduced block overwrites the first ``n`` elements of ``buf`` and the rest of
    ``buf`` is unspecified (MPI's in-place semantics); otherwise ``buf`` is only read and
    ``recvbuf`` (``n`` elements, same dtype) gets the block.  Blocking: returns when the
    result is in place; on stream-bound backends, once the work is enqueued on ``stream``.
    """)

reduce_scatterv, nonblocking_reduce_scatterv, reduce_scatterv_init = public_forms(
    OPS["reduce_scatterv"], _reduce_scatterv_checks, __name__,
    doc="""Reduce-scatter with per-rank block sizes: rank ``r`` gets ``counts[r]`` elements.

    ``counts`` (element counts, one per rank, identical on every rank) splits ``buf``
    (exactly ``sum(counts)`` elements) into consecutive blocks in rank order.  In place this
    rank's reduced block overwrites the first ``counts[rank]`` elements of ``buf`` (the rest
    is unspecified); otherwise ``recvbuf`` (exactly ``counts[rank]`` elements) gets it.
    Blocking as ``reduce_scatter``.
    """)
