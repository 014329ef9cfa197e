"""All-to-all: block ``j`` of rank ``i``'s buffer goes to block ``i`` of rank ``j``'s result."""
from __future__ import annotations

from .plan import Plan
from .recall import layout, call_blocking, call_nonblocking
from .core.errors import ArgumentError
from .validate import (block_count, check_comm, check_stream, counts_arg, disjoint_layout,
                       displs_arg, expect_at_least, expect_count, in_place_or_pair,
                       layout_extent)

__all__ = ["alltoall", "nonblocking_alltoall", "alltoallv", "nonblocking_alltoallv",
           "alltoall_init", "alltoallv_init"]


def alltoall(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic") -> None:
    """Exchange equal blocks between every pair of ranks.

    ``buf`` holds ``comm.size * n`` elements; its block ``j`` (offset ``j * n``) goes to rank
    ``j``, and block ``j`` of the result comes from rank ``j``.  In place (``recvbuf`` None)
    the received blocks replace ``buf``'s; otherwise ``recvbuf`` (same count and dtype) gets
    them.  Blocking: returns when the result is in place; on stream-bound backends, once the
    work is enqueued on ``stream``.
    """
    call_blocking("alltoall", (buf, recvbuf), comm, stream, (algo,),
                  _alltoall, buf, comm, stream, recvbuf, algo)


def nonblocking_alltoall(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic"):
    """Start ``alltoall`` and return a ``Request``; buffers must not be touched until it
    completes."""
    return call_nonblocking("alltoall", (buf, recvbuf), comm, stream, (algo,),
                            _alltoall, buf, comm, stream, recvbuf, algo)


def alltoall_init(buf, comm, stream=None, *, recvbuf=None, algo: str = "automatic") -> Plan:
    """Validate ``alltoall`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _alltoall(buf, comm, stream, recvbuf, algo).prepare()


def alltoallv(buf, send_counts, send_displs, recv_counts, recv_displs, comm, stream=None, *,
              recvbuf=None, algo: str = "automatic") -> None:
    """All-to-all with per-pair sizes.

    ``send_counts[j]`` elements at element offset ``send_displs[j]`` of ``buf`` go to rank
    ``j``; ``recv_counts[j]`` elements from rank ``j`` land at ``recv_displs[j]`` of the
    result (displacements None pack the blocks in rank order).  Rank ``i``'s
    ``send_counts[j]`` must equal rank ``j``'s ``recv_counts[i]``.  The receive blocks must
    be disjoint; send blocks may overlap.  Out of place ``buf`` holds at least the send
    layout and ``recvbuf`` at least the receive layout; elements outside the receive blocks
    are left untouched.  In place (``recvbuf`` None, MPI's semantics) each block is sent
    from and replaced in ``buf``, so the send layout must equal the receive layout.
    Blocking as ``alltoall``.
    """
    layouts = (layout(send_counts), layout(send_displs), layout(recv_counts),
               layout(recv_displs))
    call_blocking("alltoallv", (buf, recvbuf), comm, stream, (algo, *layouts),
                  _alltoallv, buf, send_counts, send_displs, recv_counts, recv_displs, comm,
                  stream, recvbuf, algo)


def nonblocking_alltoallv(buf, send_counts, send_displs, recv_counts, recv_displs, comm,
                          stream=None, *, recvbuf=None, algo: str = "automatic"):
    """Start ``alltoallv`` and return a ``Request``."""
    layouts = (layout(send_counts), layout(send_displs), layout(recv_counts),
               layout(recv_displs))
    return call_nonblocking("alltoallv", (buf, recvbuf), comm, stream, (algo, *layouts),
                            _alltoallv, buf, send_counts, send_displs, recv_counts, recv_displs,
                            comm, stream, recvbuf, algo)


def alltoallv_init(buf, send_counts, send_displs, recv_counts, recv_displs, comm, stream=None, *,
              recvbuf=None, algo: str = "automatic") -> Plan:
    """Validate ``alltoallv`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _alltoallv(buf, send_counts, send_displs, recv_counts, recv_displs, comm, stream,
               recvbuf, algo).prepare()


def _alltoall(buf, comm, stream, recvbuf, algo):
    comm = check_comm(comm)
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    block_count(sendbuf, comm, "buf")
    if sendbuf is not recvbuf:
        expect_count(recvbuf, sendbuf.count, sendbuf.dtype, "recvbuf")
    stream = check_stream(stream, comm)
    return Plan(comm, "alltoall", algo, recvbuf.nbytes, (stream, sendbuf, recvbuf))


def _alltoallv(buf, send_counts, send_displs, recv_counts, recv_displs, comm,
               stream, recvbuf, algo):
    comm = check_comm(comm)
    send_counts = counts_arg(send_counts, comm, "send_counts")
    send_displs = displs_arg(send_displs, send_counts, comm, "send_displs")
    recv_counts = counts_arg(recv_counts, comm, "recv_counts")
    recv_displs = displs_arg(recv_displs, recv_counts, comm, "recv_displs")
    disjoint_layout(recv_counts, recv_displs, "recv_displs")
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    if sendbuf is recvbuf:
        if (send_counts, send_displs) != (recv_counts, recv_displs):
            raise ArgumentError(
                f"send_counts/send_displs: an in-place alltoallv sends each block from where "
                f"its reply lands, so expected the receive layout {recv_counts}/"
                f"{recv_displs}, got {send_counts}/{send_displs}")
    else:
        expect_at_least(sendbuf, layout_extent(send_counts, send_displs), sendbuf.dtype,
                        "buf")
    expect_at_least(recvbuf, layout_extent(recv_counts, recv_displs), sendbuf.dtype,
                    "buf" if sendbuf is recvbuf else "recvbuf")
    stream = check_stream(stream, comm)
    return Plan(comm, "alltoallv", algo, recvbuf.nbytes,
                (stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts, recv_displs))
