"""Gather: the root gets every rank's buffer, concatenated in rank order."""
from __future__ import annotations

from .plan import Plan
from .recall import layout, call_blocking, call_nonblocking
from .validate import (block_count, check_comm, check_stream, counts_arg, disjoint_layout,
                       displs_arg, expect_at_least, expect_count, in_place_or_pair,
                       input_buffer, layout_extent, rank_in_range)

__all__ = ["gather", "nonblocking_gather", "gatherv", "nonblocking_gatherv", "gather_init",
           "gatherv_init"]


def gather(buf, comm, stream=None, *, root: int = 0, recvbuf=None,
           algo: str = "automatic") -> None:
    """Gather ``n`` elements from every rank into the root's ``comm.size * n`` buffer.

    Rank ``r``'s elements land at offset ``r * n``.  Non-root ranks: ``buf`` (``n``
    elements) is only read and ``recvbuf`` is ignored (it may be None).  Root, out of place:
    ``buf`` holds its ``n`` elements and ``recvbuf`` (``comm.size * n``) gets the result.
    Root, in place (``recvbuf`` None): ``buf`` holds ``comm.size * n`` elements and the
    root's contribution is read from its own slot, ``buf[root * n:(root + 1) * n]``.
    Blocking: returns when this rank's part is done; on stream-bound backends, once the
    work is enqueued on ``stream``.
    """
    call_blocking("gather", (buf, recvbuf), comm, stream, (root, algo),
                  _gather, buf, comm, stream, root, recvbuf, algo)


def nonblocking_gather(buf, comm, stream=None, *, root: int = 0, recvbuf=None,
                       algo: str = "automatic"):
    """Start ``gather`` and return a ``Request``; buffers must not be touched until it
    completes."""
    return call_nonblocking("gather", (buf, recvbuf), comm, stream, (root, algo),
                            _gather, buf, comm, stream, root, recvbuf, algo)


def gather_init(buf, comm, stream=None, *, root: int = 0, recvbuf=None,
           algo: str = "automatic") -> Plan:
    """Validate ``gather`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _gather(buf, comm, stream, root, recvbuf, algo).prepare()


def gatherv(buf, counts, displs, comm, stream=None, *, root: int = 0, recvbuf=None,
            algo: str = "automatic") -> None:
    """Gather with per-rank sizes: rank ``r`` sends ``counts[r]`` elements, which land at
    element offset ``displs[r]`` of the root's result.

    ``counts`` and ``displs`` (in elements, one per rank, identical on every rank; ``displs``
    None packs the blocks in rank order) must describe disjoint blocks.  Every rank's
    ``buf`` holds exactly ``counts[rank]`` elements, except the root's in place: then
    ``buf`` is the result buffer (at least ``max(displs[r] + counts[r])`` elements) and the
    root's contribution is read from its own block at ``displs[root]``.  Out of place the
    root's ``recvbuf`` holds at least that many; elements outside the blocks are left
    untouched.  ``recvbuf`` is ignored on non-root ranks.  Blocking as ``gather``.
    """
    call_blocking("gatherv", (buf, recvbuf), comm, stream,
                  (root, algo, layout(counts), layout(displs)),
                  _gatherv, buf, counts, displs, comm, stream, root, recvbuf, algo)


def nonblocking_gatherv(buf, counts, displs, comm, stream=None, *, root: int = 0,
                        recvbuf=None, algo: str = "automatic"):
    """Start ``gatherv`` and return a ``Request``."""
    return call_nonblocking("gatherv", (buf, recvbuf), comm, stream,
                            (root, algo, layout(counts), layout(displs)),
                            _gatherv, buf, counts, displs, comm, stream, root, recvbuf, algo)


def gatherv_init(buf, counts, displs, comm, stream=None, *, root: int = 0, recvbuf=None,
            algo: str = "automatic") -> Plan:
    """Validate ``gatherv`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _gatherv(buf, counts, displs, comm, stream, root, recvbuf, algo).prepare()


def _gather(buf, comm, stream, root, recvbuf, algo):
    comm = check_comm(comm)
    root = rank_in_range(root, comm, "root")
    if comm.rank != root:
        sendbuf, recvbuf = input_buffer(buf, comm, "buf"), None
    else:
        sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
        if sendbuf is recvbuf:
            block_count(recvbuf, comm, "buf")
        else:
            expect_count(recvbuf, comm.size * sendbuf.count, sendbuf.dtype, "recvbuf")
    stream = check_stream(stream, comm)
    return Plan(comm, "gather", algo, sendbuf.nbytes, (stream, sendbuf, recvbuf, root))


def _gatherv(buf, counts, displs, comm, stream, root, recvbuf, algo):
    comm = check_comm(comm)
    root = rank_in_range(root, comm, "root")
    counts = counts_arg(counts, comm, "counts")
    displs = displs_arg(displs, counts, comm, "displs")
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
    stream = check_stream(stream, comm)
    return Plan(comm, "gatherv", algo, sendbuf.nbytes,
                (stream, sendbuf, recvbuf, counts, displs, root))
