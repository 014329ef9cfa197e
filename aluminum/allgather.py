"""Allgather: every rank gets every rank's buffer, concatenated in rank order."""
from __future__ import annotations

from . import dispatch, selector
from .validate import (block_count, check_comm, check_stream, counts_arg, disjoint_layout,
                       displs_arg, expect_at_least, expect_count, in_place_or_pair,
                       layout_extent)

__all__ = ["allgather", "nonblocking_allgather", "allgatherv", "nonblocking_allgatherv"]


def allgather(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic") -> None:
    """Gather ``n`` elements from every rank into every rank's ``comm.size * n`` buffer.

    Rank ``r``'s elements land at offset ``r * n``.  Out of place ``buf`` holds this rank's
    ``n`` elements and ``recvbuf`` (``comm.size * n``, same dtype) gets the result.  In place
    (``recvbuf`` None) ``buf`` holds ``comm.size * n`` elements and this rank's contribution
    is read from its own slot, ``buf[rank * n:(rank + 1) * n]`` (MPI's in-place semantics).
    Blocking: returns when the result is in place; on stream-bound backends, once the work
    is enqueued on ``stream``.
    """
    _allgather(True, buf, comm, stream, recvbuf, algo)


def nonblocking_allgather(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    """Start ``allgather`` and return a ``Request``; buffers must not be touched until it
    completes."""
    return _allgather(False, buf, comm, stream, recvbuf, algo)


def allgatherv(buf, counts, displs, comm, stream=None, *, recvbuf=None,
               algo: str = "automatic") -> None:
    """Allgather with per-rank sizes: rank ``r`` contributes ``counts[r]`` elements, which
    land at element offset ``displs[r]`` of every rank's result.

    ``counts`` and ``displs`` (in elements, one per rank, identical on every rank; ``displs``
    None packs the blocks in rank order) must describe disjoint blocks.  Out of place ``buf``
    holds exactly ``counts[rank]`` elements and ``recvbuf`` at least
    ``max(displs[r] + counts[r])``; elements outside the blocks are left untouched.  In
    place ``buf`` is the result buffer and this rank's contribution is read from its own
    block at ``displs[rank]``.  Blocking as ``allgather``.
    """
    _allgatherv(True, buf, counts, displs, comm, stream, recvbuf, algo)


def nonblocking_allgatherv(buf, counts, displs, comm, stream=None, *, recvbuf=None,
                           algo: str = "automatic"):
    """Start ``allgatherv`` and return a ``Request``."""
    return _allgatherv(False, buf, counts, displs, comm, stream, recvbuf, algo)


def _allgather(blocking, buf, comm, stream, recvbuf, algo):
    comm = check_comm(comm)
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    if sendbuf is recvbuf:
        block_count(recvbuf, comm, "buf")
    else:
        expect_count(recvbuf, comm.size * sendbuf.count, sendbuf.dtype, "recvbuf")
    stream = check_stream(stream, comm)
    state_class = selector.choose(comm, "allgather", algo, recvbuf.nbytes,
                                           nonblocking=not blocking)
    return dispatch.run(comm, "allgather", state_class, recvbuf.nbytes, blocking,
                        (stream, sendbuf, recvbuf))


def _allgatherv(blocking, buf, counts, displs, comm, stream, recvbuf, algo):
    comm = check_comm(comm)
    counts = counts_arg(counts, comm, "counts")
    displs = displs_arg(displs, counts, comm, "displs")
    disjoint_layout(counts, displs, "displs")
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    if sendbuf is recvbuf:
        expect_at_least(recvbuf, layout_extent(counts, displs), recvbuf.dtype, "buf")
    else:
        expect_count(sendbuf, counts[comm.rank], sendbuf.dtype, "buf")
        expect_at_least(recvbuf, layout_extent(counts, displs), sendbuf.dtype, "recvbuf")
    stream = check_stream(stream, comm)
    state_class = selector.choose(comm, "allgatherv", algo, recvbuf.nbytes,
                                           nonblocking=not blocking)
    return dispatch.run(comm, "allgatherv", state_class, recvbuf.nbytes, blocking,
                        (stream, sendbuf, recvbuf, counts, displs))
