"""Allgather: every rank gets every rank's buffer, concatenated in rank order."""
from __future__ import annotations

from .plan import Plan
from .recall import layout, call_blocking, call_nonblocking
from .validate import (block_count, check_comm, check_stream, counts_arg, disjoint_layout,
                       displs_arg, expect_at_least, expect_count, in_place_or_pair,
                       layout_extent)

__all__ = ["allgather", "nonblocking_allgather", "allgatherv", "nonblocking_allgatherv",
           "allgather_init", "allgatherv_init"]


def allgather(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic") -> None:
    """Gather ``n`` elements from every rank into every rank's ``comm.size * n`` buffer.

    Rank ``r``'s elements land at offset ``r * n``.  Out of place ``buf`` holds this rank's
    ``n`` elements and ``recvbuf`` (``comm.size * n``, same dtype) gets the result.  In place
    (``recvbuf`` None) ``buf`` holds ``comm.size * n`` elements and this rank's contribution
    is read from its own slot, ``buf[rank * n:(rank + 1) * n]`` (MPI's in-place semantics).
    Blocking: returns when the result is in place; on stream-bound backends, once the work
    is enqueued on ``stream``.
    """
    call_blocking("allgather", (buf, recvbuf), comm, stream, (algo,),
                  _allgather, buf, comm, stream, recvbuf, algo)


def nonblocking_allgather(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    """Start ``allgather`` and return a ``Request``; buffers must not be touched until it
    completes."""
    return call_nonblocking("allgather", (buf, recvbuf), comm, stream, (algo,),
                            _allgather, buf, comm, stream, recvbuf, algo)


def allgather_init(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic") -> Plan:
    """Validate ``allgather`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _allgather(buf, comm, stream, recvbuf, algo).prepare()


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
    call_blocking("allgatherv", (buf, recvbuf), comm, stream,
                  (algo, layout(counts), layout(displs)),
                  _allgatherv, buf, counts, displs, comm, stream, recvbuf, algo)


def nonblocking_allgatherv(buf, counts, displs, comm, stream=None, *, recvbuf=None,
                           algo: str = "automatic"):
    """Start ``allgatherv`` and return a ``Request``."""
    return call_nonblocking("allgatherv", (buf, recvbuf), comm, stream,
                            (algo, layout(counts), layout(displs)),
                            _allgatherv, buf, counts, displs, comm, stream, recvbuf, algo)


def allgatherv_init(buf, counts, displs, comm, stream=None, *, recvbuf=None,
               algo: str = "automatic") -> Plan:
    """Validate ``allgatherv`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _allgatherv(buf, counts, displs, comm, stream, recvbuf, algo).prepare()


def _allgather(buf, comm, stream, recvbuf, algo):
    comm = check_comm(comm)
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    if sendbuf is recvbuf:
        block_count(recvbuf, comm, "buf")
    else:
        expect_count(recvbuf, comm.size * sendbuf.count, sendbuf.dtype, "recvbuf")
    stream = check_stream(stream, comm)
    return Plan(comm, "allgather", algo, recvbuf.nbytes, (stream, sendbuf, recvbuf))


def _allgatherv(buf, counts, displs, comm, stream, recvbuf, algo):
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
    return Plan(comm, "allgatherv", algo, recvbuf.nbytes,
                (stream, sendbuf, recvbuf, counts, displs))
