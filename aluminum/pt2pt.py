"""Point-to-point: send, recv, sendrecv and multisendrecv.

Untagged, as Aluminum: a receive matches the next send from its peer (messages between one
pair of ranks match in posting order) and must have the same count, otherwise it raises
``al.OperationError``.  All four are "unbounded" for the progress engine: always admitted, so
posted sends never starve the receives they wait for.
"""
from __future__ import annotations

from .core.errors import ArgumentError
from .core.ops import OPS
from .forms import public_forms
from .recall import call_blocking
from .validate import (Checked, disjoint_buffers, expect_dtype, input_buffer, output_buffer,
                       rank_in_range, same_or_disjoint)

__all__ = ["send", "nonblocking_send", "recv", "nonblocking_recv", "sendrecv",
           "nonblocking_sendrecv", "multisendrecv", "nonblocking_multisendrecv", "send_init",
           "recv_init", "sendrecv_init", "multisendrecv_init"]


def _send_checks(buf, dest, comm) -> Checked:
    buf = input_buffer(buf, comm, "buf")
    return Checked(buf.nbytes, (buf, dest))


def _recv_checks(buf, src, comm) -> Checked:
    buf = output_buffer(buf, comm, "buf")
    return Checked(buf.nbytes, (buf, src))


def _sendrecv_checks(sendbuf, dest, recvbuf, src, comm) -> Checked:
    send_buffer = input_buffer(sendbuf, comm, "sendbuf")
    recv_buffer = output_buffer(recvbuf, comm, "recvbuf")
    expect_dtype(recv_buffer, send_buffer.dtype, "recvbuf")
    if same_or_disjoint(send_buffer, recv_buffer, "sendbuf", "recvbuf"):
        send_buffer = recv_buffer
    return Checked(send_buffer.nbytes + recv_buffer.nbytes,
                   (send_buffer, dest, recv_buffer, src))


def _multisendrecv_checks(sends, recvs, comm) -> Checked:
    sends = _peer_buffers(sends, comm, "sends", input_buffer, "dest")
    recvs = _peer_buffers(recvs, comm, "recvs", output_buffer, "src")
    disjoint_buffers([(f"recvs[{i}]", b) for i, (b, _) in enumerate(recvs)],
                     [(f"sends[{i}]", b) for i, (b, _) in enumerate(sends)])
    nbytes = sum(b.nbytes for b, _ in sends) + sum(b.nbytes for b, _ in recvs)
    return Checked(nbytes, (sends, recvs))


def _call_multisendrecv(call, op, make, sends, recvs, comm, stream, algo):
    """``call`` (``call_blocking`` or ``call_nonblocking``) of multisendrecv (``op``): the
    buffers are the remembered objects, the peers (and with them how many sends there are)
    an option; lists that are not pairs take the full path, which says what is wrong."""
    try:
        send_buffers, send_peers = zip(*sends) if sends else ((), ())
        recv_buffers, recv_peers = zip(*recvs) if recvs else ((), ())
    except (TypeError, ValueError):
        plan = make(sends, recvs, comm, stream, algo)   # (raises, saying why)
        return plan.run() if call is call_blocking else plan.start()
    return call(op, send_buffers + recv_buffers, comm, stream,
                (algo, (send_peers, recv_peers)), make, sends, recvs, comm, stream, algo)


def _peer_buffers(pairs, comm, name, check, peer_name):
    """Validate a list of ``(buffer, peer)``; return ``[(Buffer, rank), ...]``."""
    try:
        items = list(pairs)
    except TypeError:
        raise ArgumentError(f"{name}: expected a list of (buffer, {peer_name}) pairs, got "
                            f"{type(pairs).__name__}") from None
    result = []
    for i, pair in enumerate(items):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ArgumentError(f"{name}[{i}]: expected a (buffer, {peer_name}) pair, got "
                                f"{pair!r}")
        result.append((check(pair[0], comm, f"{name}[{i}]"),
                       rank_in_range(pair[1], comm, f"{name}[{i}] {peer_name}")))
    return result


send, nonblocking_send, send_init = public_forms(
    OPS["send"], _send_checks, __name__,
    doc="""Send ``buf`` to rank ``dest``; it matches ``dest``'s receive of the same count.

    Blocking on the MPI backend: returns when ``buf`` may be reused, which for large messages
    means once ``dest`` has posted the receive.  Use ``nonblocking_send`` (or ``sendrecv``)
    where two ranks send to each other.  Stream-bound backends enqueue on ``stream``.
    """)

recv, nonblocking_recv, recv_init = public_forms(
    OPS["recv"], _recv_checks, __name__,
    doc="""Receive into ``buf`` the next message from rank ``src``, which must hold exactly
    ``buf``'s count (else ``al.OperationError``).  Blocking: returns when it has landed.""")

sendrecv, nonblocking_sendrecv, sendrecv_init = public_forms(
    OPS["sendrecv"], _sendrecv_checks, __name__,
    doc="""Send ``sendbuf`` to ``dest`` while receiving ``recvbuf`` from ``src``, deadlock-free.

    ``recvbuf`` may be ``sendbuf`` itself (in place): the buffer is sent, then replaced by
    the message from ``src``, which must then have the same count.  Otherwise the buffers
    must be disjoint and of one dtype; counts may differ.  Blocking: returns when both are
    done.
    """)

multisendrecv, nonblocking_multisendrecv, multisendrecv_init = public_forms(
    OPS["multisendrecv"], _multisendrecv_checks, __name__, call=_call_multisendrecv,
    doc="""Post every send and receive at once, then wait for all of them.

    ``sends`` and ``recvs`` are lists of ``(buffer, peer)``.  Several messages between one
    pair of ranks match in list order.  Receive buffers must be disjoint from each other
    and from the send buffers (send buffers may be shared).  Blocking: returns when all are
    done.
    """)
