"""Gather: the root gets every rank's buffer, concatenated in rank order."""
from __future__ import annotations

from .core.ops import OPS
from .forms import public_forms
from .validate import (Checked, block_count, disjoint_layout, expect_at_least, expect_count,
                       in_place_or_pair, input_buffer, layout_extent)

__all__ = ["gather", "nonblocking_gather", "gatherv", "nonblocking_gatherv", "gather_init",
           "gatherv_init"]


def _gather_checks(buf, comm, root, recvbuf) -> Checked:
    if comm.rank != root:
        sendbuf, recvbuf = input_buffer(buf, comm, "buf"), None
    else:
        sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
        if sendbuf is recvbuf:
            block_count(recvbuf, comm, "buf")
        else:
            expect_count(recvbuf, comm.size * sendbuf.count, sendbuf.dtype, "recvbuf")
    return Checked(sendbuf.nbytes, (sendbuf, recvbuf, root))


def _gatherv_checks(buf, counts, displs, comm, root, recvbuf) -> Checked:
    if comm.rank != root:
        sendbuf, recvbuf = input_buffer(buf, comm, "buf"), None
        expect_count(sendbuf, counts[comm.rank], sendbuf.dtype, "buf")
    else:
        disjoint_layout(counts, displs, "displs")
        sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
        if sendbuf is not recvbuf:
            expect_count(sendbuf, counts[root], sendbuf.dtype, "buf")
        expect_at_least(recvbuf, layout_extent(counts, displs), sendbuf.dtype,
                        "buf" if sendbuf is recvbuf else "recvbuf")
    return Checked(sendbuf.nbytes, (sendbuf, recvbuf, counts, displs, root))


gather, nonblocking_gather, gather_init = public_forms(
    OPS["gather"], _gather_checks, __name__,
    doc="""Gather ``n`` elements from every rank into the root's ``comm.size * n`` buffer.

    Rank ``r``'s elements land at offset ``r * n``.  Non-root ranks: ``buf`` (``n``
    elements) is only read and ``recvbuf`` is ignored (it may be None).  Root, out of place:
    ``buf`` holds its ``n`` elements and ``recvbuf`` (``comm.size * n``) gets the result.
    Root, in place (``recvbuf`` None): ``buf`` holds ``comm.size * n`` elements and the
    root's contribution is read from its own slot, ``buf[root * n:(root + 1) * n]``.
    Blocking: returns when this rank's part is done; on stream-bound backends, once the
    work is enqueued on ``stream``.
    """)

gatherv, nonblocking_gatherv, gatherv_init = public_forms(
    OPS["gatherv"], _gatherv_checks, __name__,
    doc="""Gather with per-rank sizes: rank ``r`` sends ``counts[r]`` elements, which land at
    element offset ``displs[r]`` of the root's result.

    ``counts`` and ``displs`` (in elements, one per rank, identical on every rank; ``displs``
    None packs the blocks in rank order) must describe disjoint blocks.  Every rank's
    ``buf`` holds exactly ``counts[rank]`` elements, except the root's in place: then
    ``buf`` is the result buffer (at least ``max(displs[r] + counts[r])`` elements) and the
    root's contribution is read from its own block at ``displs[root]``.  Out of place the
    root's ``recvbuf`` holds at least that many; elements outside the blocks are left
    untouched.  ``recvbuf`` is ignored on non-root ranks.  Blocking as ``gather``.
    """)
