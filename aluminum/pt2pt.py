"""Point-to-point: send, recv, sendrecv and multisendrecv.

Untagged, as Aluminum: a receive matches the next send from its peer (messages between one
pair of ranks match in posting order) and must have the same count, otherwise it raises
``al.OperationError``.  All four are "unbounded" for the progress engine: always admitted, so
posted sends never starve the receives they wait for.
"""
from __future__ import annotations

from .plan import Plan
from .recall import call_blocking, call_nonblocking
from .core.errors import ArgumentError
from .validate import (check_comm, check_stream, disjoint_buffers, expect_dtype, input_buffer,
                       output_buffer, rank_in_range, same_or_disjoint)

__all__ = ["send", "nonblocking_send", "recv", "nonblocking_recv", "sendrecv",
           "nonblocking_sendrecv", "multisendrecv", "nonblocking_multisendrecv", "send_init",
           "recv_init", "sendrecv_init", "multisendrecv_init"]


def send(buf, dest: int, comm, stream=None, *, algo: str = "automatic") -> None:
    """Send ``buf`` to rank ``dest``; it matches ``dest``'s receive of the same count.

    Blocking on the MPI backend: returns when ``buf`` may be reused, which for large messages
    means once ``dest`` has posted the receive.  Use ``nonblocking_send`` (or ``sendrecv``)
    where two ranks send to each other.  Stream-bound backends enqueue on ``stream``.
    """
    call_blocking("send", (buf,), comm, stream, (dest, algo),
                  _send, buf, dest, comm, stream, algo)


def nonblocking_send(buf, dest: int, comm, stream=None, *, algo: str = "automatic"):
    """Start ``send`` and return a ``Request``; ``buf`` must not be touched until it
    completes."""
    return call_nonblocking("send", (buf,), comm, stream, (dest, algo),
                            _send, buf, dest, comm, stream, algo)


def send_init(buf, dest: int, comm, stream=None, *, algo: str = "automatic") -> Plan:
    """Validate ``send`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _send(buf, dest, comm, stream, algo).prepare()


def recv(buf, src: int, comm, stream=None, *, algo: str = "automatic") -> None:
    """Receive into ``buf`` the next message from rank ``src``, which must hold exactly
    ``buf``'s count (else ``al.OperationError``).  Blocking: returns when it has landed."""
    call_blocking("recv", (buf,), comm, stream, (src, algo),
                  _recv, buf, src, comm, stream, algo)


def nonblocking_recv(buf, src: int, comm, stream=None, *, algo: str = "automatic"):
    """Start ``recv`` and return a ``Request``."""
    return call_nonblocking("recv", (buf,), comm, stream, (src, algo),
                            _recv, buf, src, comm, stream, algo)


def recv_init(buf, src: int, comm, stream=None, *, algo: str = "automatic") -> Plan:
    """Validate ``recv`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _recv(buf, src, comm, stream, algo).prepare()


def sendrecv(sendbuf, dest: int, recvbuf, src: int, comm, stream=None, *,
             algo: str = "automatic") -> None:
    """Send ``sendbuf`` to ``dest`` while receiving ``recvbuf`` from ``src``, deadlock-free.

    ``recvbuf`` may be ``sendbuf`` itself (in place): the buffer is sent, then replaced by
    the message from ``src``, which must then have the same count.  Otherwise the buffers
    must be disjoint and of one dtype; counts may differ.  Blocking: returns when both are
    done.
    """
    call_blocking("sendrecv", (sendbuf, recvbuf), comm, stream, (dest, src, algo),
                  _sendrecv, sendbuf, dest, recvbuf, src, comm, stream, algo)


def nonblocking_sendrecv(sendbuf, dest: int, recvbuf, src: int, comm, stream=None, *,
                         algo: str = "automatic"):
    """Start ``sendrecv`` and return a ``Request``."""
    return call_nonblocking("sendrecv", (sendbuf, recvbuf), comm, stream, (dest, src, algo),
                            _sendrecv, sendbuf, dest, recvbuf, src, comm, stream, algo)


def sendrecv_init(sendbuf, dest: int, recvbuf, src: int, comm, stream=None, *,
             algo: str = "automatic") -> Plan:
    """Validate ``sendrecv`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _sendrecv(sendbuf, dest, recvbuf, src, comm, stream, algo).prepare()


def multisendrecv(sends, recvs, comm, stream=None, *, algo: str = "automatic") -> None:
    """Post every send and receive at once, then wait for all of them.

    ``sends`` and ``recvs`` are lists of ``(buffer, peer)``.  Several messages between one
    pair of ranks match in list order.  Receive buffers must be disjoint from each other
    and from the send buffers (send buffers may be shared).  Blocking: returns when all are
    done.
    """
    _call_multisendrecv(call_blocking, sends, recvs, comm, stream, algo)


def nonblocking_multisendrecv(sends, recvs, comm, stream=None, *, algo: str = "automatic"):
    """Start ``multisendrecv`` and return a ``Request``."""
    return _call_multisendrecv(call_nonblocking, sends, recvs, comm, stream, algo)


def multisendrecv_init(sends, recvs, comm, stream=None, *, algo: str = "automatic") -> Plan:
    """Validate ``multisendrecv`` once; return its persistent ``Plan`` (``start()`` runs
    it nonblocking, ``run()`` blocking, always on the buffers given here)."""
    return _multisendrecv(sends, recvs, comm, stream, algo).prepare()


def _send(buf, dest, comm, stream, algo):
    comm = check_comm(comm)
    dest = rank_in_range(dest, comm, "dest")
    buf = input_buffer(buf, comm, "buf")
    stream = check_stream(stream, comm)
    return Plan(comm, "send", algo, buf.nbytes, (stream, buf, dest))


def _recv(buf, src, comm, stream, algo):
    comm = check_comm(comm)
    src = rank_in_range(src, comm, "src")
    buf = output_buffer(buf, comm, "buf")
    stream = check_stream(stream, comm)
    return Plan(comm, "recv", algo, buf.nbytes, (stream, buf, src))


def _sendrecv(sendbuf, dest, recvbuf, src, comm, stream, algo):
    comm = check_comm(comm)
    dest = rank_in_range(dest, comm, "dest")
    src = rank_in_range(src, comm, "src")
    send_buffer = input_buffer(sendbuf, comm, "sendbuf")
    recv_buffer = output_buffer(recvbuf, comm, "recvbuf")
    expect_dtype(recv_buffer, send_buffer.dtype, "recvbuf")
    if same_or_disjoint(send_buffer, recv_buffer, "sendbuf", "recvbuf"):
        send_buffer = recv_buffer
    return Plan(comm, "sendrecv", algo, send_buffer.nbytes + recv_buffer.nbytes,
                (check_stream(stream, comm), send_buffer, dest, recv_buffer, src))


def _multisendrecv(sends, recvs, comm, stream, algo):
    comm = check_comm(comm)
    sends = _peer_buffers(sends, comm, "sends", input_buffer, "dest")
    recvs = _peer_buffers(recvs, comm, "recvs", output_buffer, "src")
    disjoint_buffers([(f"recvs[{i}]", b) for i, (b, _) in enumerate(recvs)],
                     [(f"sends[{i}]", b) for i, (b, _) in enumerate(sends)])
    nbytes = sum(b.nbytes for b, _ in sends) + sum(b.nbytes for b, _ in recvs)
    return Plan(comm, "multisendrecv", algo, nbytes,
                (check_stream(stream, comm), sends, recvs))


def _call_multisendrecv(call, sends, recvs, comm, stream, algo):
    """``call`` (``call_blocking`` or ``call_nonblocking``) of this multisendrecv: the
    buffers are the remembered objects, the peers (and with them how many sends there are)
    an option; lists that are not pairs take the full path, which says what is wrong."""
    try:
        objects = tuple(buf for buf, _ in sends) + tuple(buf for buf, _ in recvs)
        peers = (tuple(peer for _, peer in sends), tuple(peer for _, peer in recvs))
    except (TypeError, ValueError):
        plan = _multisendrecv(sends, recvs, comm, stream, algo)   # (raises, saying why)
        return plan.run() if call is call_blocking else plan.start()
    return call("multisendrecv", objects, comm, stream, (algo, peers),
                _multisendrecv, sends, recvs, comm, stream, algo)


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

