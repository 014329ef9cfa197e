"""Allgather: every rank gets every rank's buffer, concatenated in rank order."""
from __future__ import annotations

from .core.ops import OPS
from .forms import public_forms
from .validate import (Checked, block_count, disjoint_layout, expect_at_least, expect_count,
                       in_place_or_pair, layout_extent)

__all__ = ["allgather", "nonblocking_allgather", "allgatherv", "nonblocking_allgatherv",
           "allgather_init", "allgatherv_init"]


def _allgather_checks(buf, comm, recvbuf) -> Checked:
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    if sendbuf is recvbuf:
        block_count(recvbuf, comm, "buf")
    else:
        expect_count(recvbuf, comm.size * sendbuf.count, sendbuf.dtype, "recvbuf")
    return Checked(recvbuf.nbytes, (sendbuf, recvbuf))


def _allgatherv_checks(buf, counts, displs, comm, recvbuf) -> Checked:
    disjoint_layout(counts, displs, "displs")
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    if sendbuf is recvbuf:
        expect_at_least(recvbuf, layout_extent(counts, displs), recvbuf.dtype, "buf")
    else:
        expect_count(sendbuf, counts[comm.rank], sendbuf.dtype, "buf")
        expect_at_least(recvbuf, layout_extent(counts, displs), sendbuf.dtype, "recvbuf")
    return Checked(recvbuf.nbytes, (sendbuf, recvbuf, counts, displs))


allgather, nonblocking_allgather, allgather_init = public_forms(
    OPS["allgather"], _allgather_checks, __name__,
    doc="""Gather ``n`` elements from every rank into every rank's ``comm.size * n`` buffer.

    Rank ``r``'s elements land at offset ``r * n``.  Out of place ``buf`` holds this rank's
    ``n`` elements and ``recvbuf`` (``comm.size * n``, same dtype) gets the result.  In place
    (``recvbuf`` None) ``buf`` holds ``comm.size * n`` elements and this rank's contribution
    is read from its own slot, ``buf[rank * n:(rank + 1) * n]`` (MPI's in-place semantics).
    Blocking: returns when the result is in place; on stream-bound backends, once the work
    is enqueued on ``stream``.
    """)

allgatherv, nonblocking_allgatherv, allgatherv_init = public_forms(
    OPS["allgatherv"], _allgatherv_checks, __name__,
    doc="""Allgather with per-rank sizes: rank ``r`` contributes ``counts[r]`` elements, which
    land at element offset ``displs[r]`` of every rank's result.

    ``counts`` and ``displs`` (in elements, one per rank, identical on every rank; ``displs``
    None packs the blocks in rank order) must describe disjoint blocks.  Out of place ``buf``
    holds exactly ``counts[rank]`` elements and ``recvbuf`` at least
    ``max(displs[r] + counts[r])``; elements outside the blocks are left untouched.  In
    place ``buf`` is the result buffer and this rank's contribution is read from its own
    block at ``displs[rank]``.  Blocking as ``allgather``.
    """)
