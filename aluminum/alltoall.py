"""All-to-all: block ``j`` of rank ``i``'s buffer goes to block ``i`` of rank ``j``'s result."""
from __future__ import annotations

from .core.errors import ArgumentError
from .core.ops import OPS
from .forms import public_forms
from .validate import (Checked, block_count, disjoint_layout, expect_at_least, expect_count,
                       in_place_or_pair, layout_extent)

__all__ = ["alltoall", "nonblocking_alltoall", "alltoallv", "nonblocking_alltoallv",
           "alltoall_init", "alltoallv_init"]


def _alltoall_checks(buf, comm, recvbuf) -> Checked:
    sendbuf, recvbuf = in_place_or_pair(buf, recvbuf, comm)
    block_count(sendbuf, comm, "buf")
    if sendbuf is not recvbuf:
        expect_count(recvbuf, sendbuf.count, sendbuf.dtype, "recvbuf")
    return Checked(recvbuf.nbytes, (sendbuf, recvbuf))


def _alltoallv_checks(buf, send_counts, send_displs, recv_counts, recv_displs, comm,
                      recvbuf) -> Checked:
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
    return Checked(recvbuf.nbytes,
                   (sendbuf, recvbuf, send_counts, send_displs, recv_counts, recv_displs))


alltoall, nonblocking_alltoall, alltoall_init = public_forms(
    OPS["alltoall"], _alltoall_checks, __name__,
    doc="""Exchange equal blocks between every pair of ranks.

    ``buf`` holds ``comm.size * n`` elements; its block ``j`` (offset ``j * n``) goes to rank
    ``j``, and block ``j`` of the result comes from rank ``j``.  In place (``recvbuf`` None)
    the received blocks replace ``buf``'s; otherwise ``recvbuf`` (same count and dtype) gets
    them.  Blocking: returns when the result is in place; on stream-bound backends, once the
    work is enqueued on ``stream``.
    """)

alltoallv, nonblocking_alltoallv, alltoallv_init = public_forms(
    OPS["alltoallv"], _alltoallv_checks, __name__,
    doc="""All-to-all with per-pair sizes.

    ``send_counts[j]`` elements at element offset ``send_displs[j]`` of ``buf`` go to rank
    ``j``; ``recv_counts[j]`` elements from rank ``j`` land at ``recv_displs[j]`` of the
    result (displacements None pack the blocks in rank order).  Rank ``i``'s
    ``send_counts[j]`` must equal rank ``j``'s ``recv_counts[i]``.  The receive blocks must
    be disjoint; send blocks may overlap.  Out of place ``buf`` holds at least the send
    layout and ``recvbuf`` at least the receive layout; elements outside the receive blocks
    are left untouched.  In place (``recvbuf`` None, MPI's semantics) each block is sent
    from and replaced in ``buf``, so the send layout must equal the receive layout.
    Blocking as ``alltoall``.
    """)
