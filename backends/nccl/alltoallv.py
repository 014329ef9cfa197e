"""All-to-all with per-rank layouts: grouped ``ncclSend``/``ncclRecv`` per peer.

State arguments: ``(comm, stream, sendbuf, recvbuf, send_counts, send_displs, recv_counts,
recv_displs)``, in elements.  In place (``sendbuf is recvbuf``) the send layout is the
receive layout (MPI's rule) and the buffer is first copied to scratch.
"""
from __future__ import annotations

from .p2p import exchange_blocks
from .state import NCCLState, copy_of


class NCCLAlltoallv(NCCLState):
    name = "alltoallv/nccl"

    @classmethod
    def enqueue(cls, ctx, comm, stream, sendbuf, recvbuf, send_counts, send_displs,
                recv_counts, recv_displs):
        itemsize = recvbuf.dtype.itemsize
        scratch, send = [], sendbuf.ptr
        if sendbuf is recvbuf:
            send, scratch = copy_of(ctx, stream, sendbuf)
            send_counts, send_displs = recv_counts, recv_displs
        exchange_blocks(ctx, comm, stream,
                        send, _in_bytes(send_counts, send_displs, itemsize),
                        recvbuf.ptr, _in_bytes(recv_counts, recv_displs, itemsize))
        return scratch


def _in_bytes(counts, displs, itemsize) -> list[tuple[int, int]]:
    return [(count * itemsize, displ * itemsize) for count, displ in zip(counts, displs)]
