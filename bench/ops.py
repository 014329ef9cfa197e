"""What the benchmark runs for each operation: buffer layout, bus-bandwidth factor, our call.

Sizes follow nccl-tests: ``Size`` is the bytes of the largest buffer of the operation — the
vector for allreduce, reduce and bcast; the whole input of reduce_scatter, alltoall and
scatter; the whole output of allgather and gather (one rank's share is Size/p). That is also
the byte count the selector is asked about (aluminum/tuning/costmodel.py uses the same ``n``), so a
tuned threshold means what the Size column says. Counts are rounded down to a multiple of p
(at least one element per rank), as nccl-tests does, so the Size reported is the size run.

busbw = algbw × factor (nccl-tests, PERFORMANCE.md): allreduce 2(p−1)/p; reduce_scatter,
allgather, alltoall, gather, scatter and their v-variants (p−1)/p; bcast, reduce, sendrecv,
multisendrecv and the send/recv ping-pong 1; barrier moves no data.

Point-to-point: ``sendrecv`` sends to rank+1 and receives from rank−1 (a ring shift);
``send`` (alias ``recv``) is an OSU-style ping-pong between ranks 0 and 1 whose time is half
the round trip; ``multisendrecv`` exchanges Size/(p−1) bytes with every other rank. Rooted
operations use root 0. In-place layouts follow MPI's: the root's buffer is the whole
gathered/scattered vector, the other ranks' buffers their own block. ``multisendrecv`` is
always out of place (its receive buffers must be disjoint from its send buffers).

The selector is asked about Size, except for gather and scatter (and their v-variants),
whose dispatch passes one rank's share, Size/p (``OpSpec.selector_bytes``).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import aluminum as al

ROOT = 0


@dataclass(frozen=True)
class OpSpec:
    """How one operation is laid out and measured."""

    name: str
    kind: str               # "vector", "split_input", "split_output", "barrier", "p2p"
    bus_factor: Callable[[int], float]
    reduces: bool = False   # takes op=SUM
    rooted: bool = False
    variable: bool = False  # a v-variant: passes counts (and displacements)
    share_selected: bool = False  # the selector sees one rank's share (Size/p), not Size

    def selector_bytes(self, size: int, p: int) -> int:
        """The byte count aluminum's dispatch asks the selector about for this Size."""
        return size // p if self.share_selected else size


def _all_reduce_factor(p: int) -> float:
    return 2 * (p - 1) / p


def _share_factor(p: int) -> float:
    return (p - 1) / p


def _one(p: int) -> float:
    return 1.0


def _zero(p: int) -> float:
    return 0.0


SPECS: dict[str, OpSpec] = {spec.name: spec for spec in (
    OpSpec("allreduce", "vector", _all_reduce_factor, reduces=True),
    OpSpec("reduce", "vector", _one, reduces=True, rooted=True),
    OpSpec("bcast", "vector", _one, rooted=True),
    OpSpec("reduce_scatter", "split_input", _share_factor, reduces=True),
    OpSpec("reduce_scatterv", "split_input", _share_factor, reduces=True, variable=True),
    OpSpec("alltoall", "split_input", _share_factor),
    OpSpec("alltoallv", "split_input", _share_factor, variable=True),
    OpSpec("scatter", "split_input", _share_factor, rooted=True, share_selected=True),
    OpSpec("scatterv", "split_input", _share_factor, rooted=True, variable=True,
           share_selected=True),
    OpSpec("allgather", "split_output", _share_factor),
    OpSpec("allgatherv", "split_output", _share_factor, variable=True),
    OpSpec("gather", "split_output", _share_factor, rooted=True, share_selected=True),
    OpSpec("gatherv", "split_output", _share_factor, rooted=True, variable=True,
           share_selected=True),
    OpSpec("barrier", "barrier", _zero),
    OpSpec("sendrecv", "p2p", _one),
    OpSpec("send", "p2p", _one),
    OpSpec("multisendrecv", "p2p", _one),
)}
ALIASES = {"recv": "send", "pingpong": "send"}


def spec(op: str) -> OpSpec:
    """The OpSpec of `op` (aliases allowed); ValueError listing the choices otherwise."""
    found = SPECS.get(ALIASES.get(op, op))
    if found is None:
        raise ValueError(f"op: expected one of {', '.join(SPECS)}, got {op!r}")
    return found


@dataclass
class Case:
    """The buffers of one (op, size) point on this rank; `recv` is None in place."""

    spec: OpSpec
    size: int                    # bytes, as reported and as the selector sees them
    count: int                   # elements of one rank's block (the vector for "vector" ops)
    rank: int
    p: int
    send: Any
    recv: Any
    counts: list[int]
    displs: list[int]


def block_count(spec_: OpSpec, size: int, itemsize: int, p: int) -> int:
    """Elements per block for a requested size in bytes (at least one)."""
    if spec_.kind in ("split_input", "split_output"):
        return max(1, size // itemsize // p)
    if spec_.name == "multisendrecv":
        return max(1, size // itemsize // max(1, p - 1))
    return max(1, size // itemsize)


def actual_size(spec_: OpSpec, size: int, itemsize: int, p: int) -> int:
    """The bytes a point requested as `size` really moves (see the module docstring)."""
    if spec_.kind == "barrier":
        return 0
    count = block_count(spec_, size, itemsize, p)
    if spec_.kind in ("split_input", "split_output"):
        return count * p * itemsize
    if spec_.name == "multisendrecv":
        return count * max(1, p - 1) * itemsize
    return count * itemsize


def build_case(spec_: OpSpec, size: int, dtype: np.dtype, inplace: bool, rank: int, p: int,
               zeros: Callable[[int, np.dtype], Any] = np.zeros) -> Case:
    """Allocate the buffers of one point; `zeros(count, dtype)` allocates (numpy or cupy)."""
    count = block_count(spec_, size, dtype.itemsize, p)
    whole = count * p
    counts, displs = [count] * p, [count * r for r in range(p)]
    root = rank == ROOT
    kind = spec_.kind
    if kind == "barrier":
        send = recv = None
    elif kind == "vector":
        send = zeros(count, dtype)
        recv = None if inplace or spec_.name == "bcast" else zeros(count, dtype)
    elif kind == "split_input":
        has_input = not spec_.rooted or root
        if inplace:
            send, recv = zeros(whole if has_input else count, dtype), None
        else:
            in_count = whole if has_input else 1
            out_count = whole if spec_.name.startswith("alltoall") else count
            send, recv = zeros(max(in_count, 1), dtype), zeros(out_count, dtype)
    elif kind == "split_output":
        has_output = not spec_.rooted or root
        if inplace:
            send, recv = zeros(whole if has_output else count, dtype), None
        else:
            send, recv = zeros(count, dtype), zeros(whole if has_output else 1, dtype)
    elif spec_.name == "multisendrecv":
        # Receive buffers must be disjoint from send buffers: never in place.
        send = [zeros(count, dtype) for _ in range(max(p - 1, 0))]
        recv = [zeros(count, dtype) for _ in range(max(p - 1, 0))]
    else:
        send = zeros(count, dtype)
        recv = None if inplace or spec_.name == "send" else zeros(count, dtype)
    return Case(spec_, actual_size(spec_, size, dtype.itemsize, p), count, rank, p,
                send, recv, counts, displs)


def _accepts_algo(fn: Callable) -> bool:
    try:
        return "algo" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def our_function(op: str, nonblocking: bool) -> Callable:
    """``al.<op>`` or ``al.nonblocking_<op>``; LookupError when this build lacks it."""
    name = ("nonblocking_" if nonblocking else "") + op
    fn = getattr(al, name, None)
    if fn is None:
        raise LookupError(f"this aluminum has no al.{name} yet")
    return fn


def our_call(case: Case, comm, algo: str, nonblocking: bool,
             new_buffers: bool = False) -> Callable[[], None]:
    """A no-argument callable running one of our operations to completion.

    Nonblocking: start, then ``wait()``. Stream-bound backends: the host also waits for the
    communicator's stream, so the time includes the device work. ``algo`` is passed only
    to operations that accept it; for the others only "automatic" or "mpi_passthrough"
    (their one implementation) make sense. ``new_buffers``: every call allocates new
    buffers like the point's (``renewer``) and passes those, as code that writes
    ``al.allreduce(np.ones(n), comm)`` does; the allocation is timed with the call."""
    spec_ = case.spec
    name = spec_.name
    fn = our_function(name, nonblocking)
    kw: dict[str, Any] = {}
    if _accepts_algo(fn):
        kw["algo"] = algo
    elif algo not in ("automatic", "mpi_passthrough"):
        raise LookupError(f"al.{fn.__name__} takes no algo=, so it cannot run {algo!r}")
    if spec_.rooted:
        kw["root"] = ROOT
    if name == "send":
        call = _pingpong(case, comm, nonblocking, new_buffers)
    elif new_buffers:
        caller = _caller(case, comm, fn, kw)
        new_send, new_recv = renewer(case.send), renewer(case.recv)
        call = lambda: caller(new_send(), new_recv())  # noqa: E731
    else:
        call = _bind(case, comm, fn, kw)
    if nonblocking and name != "send":
        start = call
        call = lambda: start().wait()  # noqa: E731
    stream = getattr(comm, "stream", None)
    if stream is not None and comm.backend.uses_streams:
        run = call
        call = lambda: (run(), stream.synchronize())  # noqa: E731
    return call


def _bind(case: Case, comm, fn: Callable, kw: dict) -> Callable[[], Any]:
    """Our call on the case's buffers, as a no-argument callable."""
    return _written(case, comm, fn, kw, "", "send", "recv")


def _caller(case: Case, comm, fn: Callable, kw: dict) -> Callable[[Any, Any], Any]:
    """``_bind``'s call with the buffers as arguments: ``caller(send, recv)`` (``recv``
    None in place), for calls on new buffers."""
    return _written(case, comm, fn, kw, "new_send, new_recv", "new_send", "new_recv")


def _written(case: Case, comm, fn: Callable, kw: dict, parameters: str, send: str,
             recv: str) -> Callable:
    """``lambda <parameters>: fn(...)``, the call written out as a user writes it: its
    arguments positional and ``kw`` as literal keywords.  (Calling ``fn(..., **kw)`` would
    cost every timed call a dict and CPython's generic call path, about 0.12 us on one rank
    here, which neither a user's literal call nor mpi4py's in the same sweep pays.)"""
    p, rank = case.p, case.rank
    name = case.spec.name
    peers = [r for r in range(p) if r != rank]
    recv_or_send = f"({send} if {recv} is None else {recv})"
    if parameters:   # (new buffers: the pairs are made in the call, as the buffers are)
        pairs = [f"list(zip({send}, peers))", f"list(zip({recv_or_send}, peers))"]
    else:            # (the same buffers every call: the same lists of pairs too)
        pairs = ["sends", "recvs"]
    if name == "barrier":
        arguments = ["comm"]
    elif name == "sendrecv":
        arguments = [send, "right", recv_or_send, "left", "comm"]
    elif name == "multisendrecv":
        arguments = [*pairs, "comm"]
    elif name == "reduce_scatterv":
        arguments = [send, "counts", "comm"]
    elif name in ("allgatherv", "gatherv", "scatterv"):
        arguments = [send, "counts", "displs", "comm"]
    elif name == "alltoallv":
        arguments = [send, "counts", "displs", "counts", "displs", "comm"]
    else:
        arguments = [send, "comm"]
    arguments += [f"{key}=kw_{key}" for key in kw]
    if case.recv is not None and name not in ("barrier", "sendrecv", "multisendrecv"):
        arguments.append(f"recvbuf={recv}")
    namespace = {"fn": fn, "comm": comm, "send": case.send, "recv": case.recv,
                 "right": (rank + 1) % p, "left": (rank - 1) % p, "peers": peers,
                 "counts": case.counts, "displs": case.displs,
                 **{f"kw_{key}": value for key, value in kw.items()}}
    if name == "multisendrecv" and not parameters:
        namespace["sends"] = list(zip(case.send, peers))
        namespace["recvs"] = list(zip(case.send if case.recv is None else case.recv, peers))
    return eval(f"lambda {parameters}: fn({', '.join(arguments)})", namespace)  # noqa: S307


def renewer(buf) -> Callable[[], Any]:
    """A function making a new zeroed buffer like ``buf`` (numpy or cupy) on every call; a
    list of them for a list; None for None."""
    if buf is None:
        return lambda: None
    if isinstance(buf, list):
        makers = [renewer(one) for one in buf]
        return lambda: [make() for make in makers]
    zeros = np.zeros if isinstance(buf, np.ndarray) else type(buf).__module__.split(".")[0]
    if isinstance(zeros, str):   # a device array: its own module's zeros (cupy.zeros)
        import importlib

        zeros = importlib.import_module(zeros).zeros
    shape, dtype = buf.shape, buf.dtype
    return lambda: zeros(shape, dtype)


def _pingpong(case: Case, comm, nonblocking: bool,
              new_buffers: bool = False) -> Callable[[], Any]:
    """One round trip between ranks 0 and 1 (each half waited on); other ranks idle."""
    send_fn = our_function("send", nonblocking)
    recv_fn = our_function("recv", nonblocking)
    buf = case.send
    new = renewer(buf)
    if nonblocking and new_buffers:
        def send(peer):
            send_fn(new(), peer, comm).wait()

        def recv(peer):
            recv_fn(new(), peer, comm).wait()
    elif nonblocking:
        def send(peer):
            send_fn(buf, peer, comm).wait()

        def recv(peer):
            recv_fn(buf, peer, comm).wait()
    elif new_buffers:
        def send(peer):
            send_fn(new(), peer, comm)

        def recv(peer):
            recv_fn(new(), peer, comm)
    else:
        def send(peer):
            send_fn(buf, peer, comm)

        def recv(peer):
            recv_fn(buf, peer, comm)
    if case.rank == 0:
        return lambda: (send(1), recv(1))
    if case.rank == 1:
        return lambda: (recv(0), send(0))
    return lambda: None


def per_call_divisor(op: str) -> int:
    """How many one-way latencies one timed call holds (2 for the ping-pong)."""
    return 2 if spec(op).name == "send" else 1
