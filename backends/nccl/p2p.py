"""Grouped point-to-point shared by all-to-all, gathers and scatters."""
from __future__ import annotations

from .datatypes import BYTES


def exchange_blocks(ctx, comm, stream, send: int, send_layout, recv: int, recv_layout) -> None:
    """Send block ``peer`` of ``send`` to each peer and receive block ``peer`` of ``recv``
    from it, in one NCCL group; this rank's own block is a device copy.

    Layouts list ``(nbytes, byte offset)`` per peer; empty blocks are skipped (both sides
    see the same layout entry, so they skip together).  The own block copies as many bytes
    as both layouts give it (none where an in-place operation leaves it where it is).
    """
    handle, rank = ctx.device.handle(stream), comm.rank
    with ctx.group():
        for peer, ((send_bytes, send_at), (recv_bytes, recv_at)) in enumerate(
                zip(send_layout, recv_layout)):
            if peer == rank:
                continue
            if recv_bytes:
                ctx.nccl.recv(recv + recv_at, recv_bytes, BYTES, peer, handle)
            if send_bytes:
                ctx.nccl.send(send + send_at, send_bytes, BYTES, peer, handle)
    (send_bytes, send_at), (recv_bytes, recv_at) = send_layout[rank], recv_layout[rank]
    ctx.device.copy(recv + recv_at, send + send_at, min(send_bytes, recv_bytes), stream)


def nothing(comm) -> list[tuple[int, int]]:
    """A layout with no block for any peer, to fill in the few that carry data."""
    return [(0, 0)] * comm.size
