"""Scatter: rank ``r`` gets block ``r`` of the root's buffer."""
from __future__ import annotations

from .core.ops import OPS
from .forms import public_forms
from .validate import (Checked, block_count, expect_at_least, expect_count, in_place_or_pair,
                       input_buffer, layout_extent, output_buffer)

__all__ = ["scatter", "nonblocking_scatter", "scatterv", "nonblocking_scatterv", "scatter_init",
           "scatterv_init"]


def _receive_buffer(buf, recvbuf, comm):
    """A non-root rank's receive buffer: ``recvbuf`` if given, else ``buf``."""
    if recvbuf is None:
        return output_buffer(buf, comm, "buf"), "buf"
    return output_buffer(recvbuf, comm, "recvbuf"), "recvbuf"


def _root_buffers(buf, recvbuf, comm):
    """The root's (sendbuf, recvbuf); in place nothing is written, so ``buf`` may be read-only."""
    if recvbuf is None:
        sendbuf = input_buffer(buf, comm, "buf")
        return sendbuf, sendbuf
    return in_place_or_pair(buf, recvbuf, comm)


def _scatter_checks(buf, comm, root, recvbuf) -> Checked:
    if comm.rank != root:
        sendbuf, (recvbuf, _) = None, _receive_buffer(buf, recvbuf, comm)
    else:
        sendbuf, recvbuf = _root_buffers(buf, recvbuf, comm)
        if sendbuf is recvbuf:
            block_count(sendbuf, comm, "buf")
        else:
            expect_count(sendbuf, comm.size * recvbuf.count, recvbuf.dtype, "buf")
    return Checked(recvbuf.nbytes, (sendbuf, recvbuf, root))


def _scatterv_checks(buf, counts, displs, comm, root, recvbuf) -> Checked:
    if comm.rank != root:
        sendbuf, (recvbuf, name) = None, _receive_buffer(buf, recvbuf, comm)
        expect_count(recvbuf, counts[comm.rank], recvbuf.dtype, name)
    else:
        sendbuf, recvbuf = _root_buffers(buf, recvbuf, comm)
        expect_at_least(sendbuf, layout_extent(counts, displs), sendbuf.dtype, "buf")
        if sendbuf is not recvbuf:
            expect_count(recvbuf, counts[root], sendbuf.dtype, "recvbuf")
    return Checked(recvbuf.nbytes, (sendbuf, recvbuf, counts, displs, root))


scatter, nonblocking_scatter, scatter_init = public_forms(
    OPS["scatter"], _scatter_checks, __name__,
    doc="""Split the root's ``comm.size * n`` elements into blocks; rank ``r`` gets block ``r``.

    Non-root ranks: the block lands in ``recvbuf`` (``n`` elements) if given, and then
    ``buf`` is ignored (it may be None); else in ``buf``.  Root: ``buf`` holds
    ``comm.size * n`` elements and is only read; out of place its own block is copied into
    ``recvbuf`` (``n``), in place (``recvbuf`` None) it simply stays at
    ``buf[root * n:(root + 1) * n]``.  Blocking: returns when this rank's part is done; on
    stream-bound backends, once the work is enqueued on ``stream``.
    """)

scatterv, nonblocking_scatterv, scatterv_init = public_forms(
    OPS["scatterv"], _scatterv_checks, __name__,
    doc="""Scatter with per-rank sizes: rank ``r`` gets the ``counts[r]`` elements at element
    offset ``displs[r]`` of the root's ``buf``.

    ``counts`` and ``displs`` (in elements, one per rank, identical on every rank; ``displs``
    None packs the blocks in rank order) may overlap.  The root's ``buf`` holds at least
    ``max(displs[r] + counts[r])`` elements and is only read; each rank's receive buffer
    (``recvbuf``, else ``buf`` on non-root ranks) holds exactly ``counts[rank]``.  In place
    at the root (``recvbuf`` None) its block stays at ``displs[root]``.  Blocking as
    ``scatter``.
    """)
