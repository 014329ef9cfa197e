"""Argument checks shared by every public operation.

``table_arguments`` runs the checks an operation's row of the op table calls for (its root,
layouts, peers and reduction op), before the operation's own checks of its buffers, which
return a ``Checked``.  Each check raises an ``AluminumError`` subclass whose message names the
argument and says what was expected and what was given.  Checks run before anything is
written, so a rejected call leaves user buffers untouched and the communicator usable.
"""
from __future__ import annotations

import itertools
import operator
from typing import NamedTuple

import numpy as np

from .core.buffers import HOST, Buffer, as_buffer
from .communicator import Communicator
from .core.errors import ArgumentError, BufferError
from .core.ops import OpSpec
from .core.reduction import ReductionOp, as_reduction_op, check_op_for_dtype


class Checked(NamedTuple):
    """What an operation's own checks return: the ``nbytes`` its plan reports, its State's
    arguments after the stream (``args``), and ``inplace`` where the selector's placement
    rules apply (allreduce), else None."""
    nbytes: int
    args: tuple
    inplace: bool | None = None


def table_arguments(row: OpSpec, comm: Communicator, arguments: dict) -> None:
    """Check (and replace by their checked values, in ``arguments``: name -> value) the
    arguments ``row`` declares besides buffers: ``root`` where rooted, each peer rank, each
    layout (counts: one non-negative integer per rank; displs: the same, None packing the
    blocks of the counts of the same prefix), and ``op`` where a reduction (whether it is
    defined on the buffers' dtype is the operation's own check, ``reduction_op``)."""
    if row.rooted:
        arguments["root"] = rank_in_range(arguments["root"], comm, "root")
    for name in row.peers:
        arguments[name] = rank_in_range(arguments[name], comm, name)
    for name in row.layouts:
        if name.endswith("counts"):
            arguments[name] = counts_arg(arguments[name], comm, name)
        else:
            counts = arguments[name[:-len("displs")] + "counts"]
            arguments[name] = displs_arg(arguments[name], counts, comm, name)
    if row.reduction:
        arguments["op"] = as_reduction_op(arguments["op"])


def check_comm(comm: object) -> Communicator:
    """``comm`` must be a live aluminum communicator."""
    if not isinstance(comm, Communicator):
        raise ArgumentError(f"comm: expected an aluminum communicator (e.g. al.MPICommunicator),"
                            f" got {type(comm).__name__}")
    if comm.freed:
        raise comm.unusable_error()
    return comm


def input_buffer(obj: object, comm: Communicator, name: str = "buf") -> Buffer:
    """A buffer the operation reads, on a device the communicator's backend can use."""
    buf = as_buffer(obj, name)
    if buf.device not in comm.backend.devices:
        if buf.device == HOST:
            raise BufferError(f"{name}: the {comm.backend.name} backend needs GPU memory "
                              f"(__cuda_array_interface__), got a host {type(obj).__name__}")
        raise BufferError(f"{name}: the {comm.backend.name} backend needs host memory, got a "
                          f"{buf.device.upper()} device buffer (__cuda_array_interface__); "
                          f"use al.NCCLCommunicator or al.HostTransferCommunicator")
    return buf


def output_buffer(obj: object, comm: Communicator, name: str = "recvbuf") -> Buffer:
    """A buffer the operation writes: as ``input_buffer`` and writable."""
    buf = input_buffer(obj, comm, name)
    if not buf.writable:
        raise BufferError(f"{name}: expected a writable buffer, got a read-only "
                          f"{type(buf.obj).__name__}")
    return buf


def expect_count(buf: Buffer, count: int, dtype: np.dtype, name: str) -> None:
    """``buf`` must hold exactly ``count`` elements of ``dtype``."""
    if buf.count != count or buf.dtype != dtype:
        raise BufferError(f"{name}: expected {count} elements of {dtype}, got {buf.describe()}")


def expect_dtype(buf: Buffer, dtype: np.dtype, name: str) -> None:
    """``buf`` must hold elements of ``dtype``."""
    if buf.dtype != dtype:
        raise BufferError(f"{name}: expected elements of {dtype}, got {buf.describe()}")


def expect_at_least(buf: Buffer, count: int, dtype: np.dtype, name: str) -> None:
    """``buf`` must hold at least ``count`` elements of ``dtype``."""
    expect_dtype(buf, dtype, name)
    if buf.count < count:
        raise BufferError(f"{name}: expected at least {count} elements of {dtype}, "
                          f"got {buf.describe()}")


def reduction_op(op: object, dtype: np.dtype) -> ReductionOp:
    """Parse ``op`` and check it is defined on ``dtype``."""
    op = as_reduction_op(op)
    check_op_for_dtype(op, dtype)
    return op


def same_or_disjoint(sendbuf: Buffer, recvbuf: Buffer, send_name: str = "buf",
                     recv_name: str = "recvbuf") -> bool:
    """True when ``recvbuf`` is ``sendbuf`` itself (in place); raise on partial overlap."""
    if sendbuf.array is not None and recvbuf.array is not None \
            and not np.may_share_memory(sendbuf.array, recvbuf.array):
        return False   # disjoint host arrays: decided without computing addresses
    if sendbuf.ptr == recvbuf.ptr and sendbuf.nbytes == recvbuf.nbytes:
        return True
    if _overlap(sendbuf, recvbuf):
        raise BufferError(f"{recv_name}: overlaps {send_name} without being the same buffer; "
                          f"pass the same buffer for an in-place operation or use disjoint "
                          f"buffers")
    return False


def _overlap(a: Buffer, b: Buffer) -> bool:
    return (a.device == b.device and a.nbytes > 0 and b.nbytes > 0
            and a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes)


def in_place_or_pair(buf: object, recvbuf: object, comm: Communicator) -> tuple[Buffer, Buffer]:
    """``(sendbuf, recvbuf)`` of an operation that works in place unless ``recvbuf`` is given.

    In place (``recvbuf`` is None, or the very buffer ``buf`` is) both are one writable
    ``Buffer`` and ``sendbuf is recvbuf``; otherwise ``buf`` is only read and ``recvbuf`` must
    be writable, of ``buf``'s dtype and disjoint from it.  Counts are the caller's to check.
    """
    if recvbuf is None:
        out = output_buffer(buf, comm, "buf")
        return out, out
    sendbuf = input_buffer(buf, comm, "buf")
    out = output_buffer(recvbuf, comm, "recvbuf")
    expect_dtype(out, sendbuf.dtype, "recvbuf")
    if same_or_disjoint(sendbuf, out):
        return out, out
    return sendbuf, out


def disjoint_buffers(receives: list[tuple[str, Buffer]],
                     others: list[tuple[str, Buffer]]) -> None:
    """No host receive buffer may share memory with another buffer of the operation;
    ``others`` (read-only sources) may overlap each other.  Each pair is ``(name, buffer)``."""
    spans = sorted((b.ptr, b.ptr + b.nbytes, is_receive, name)
                   for is_receive, pairs in ((True, receives), (False, others))
                   for name, b in pairs if b.nbytes and b.is_host)
    furthest = furthest_receive = (0, "")
    for start, end, is_receive, name in spans:
        reach, other = furthest if is_receive else furthest_receive
        if start < reach:
            raise BufferError(f"{name}: overlaps {other}; a receive buffer must not share "
                              f"memory with any other buffer of the operation")
        furthest = max(furthest, (end, name))
        if is_receive:
            furthest_receive = max(furthest_receive, (end, name))


def block_count(buf: Buffer, comm: Communicator, name: str) -> int:
    """Elements per rank of ``buf`` split into ``comm.size`` equal blocks."""
    if buf.count % comm.size:
        raise BufferError(f"{name}: expected a multiple of {comm.size} elements (one equal "
                          f"block per rank), got {buf.describe()}")
    return buf.count // comm.size


def counts_arg(counts: object, comm: Communicator, name: str) -> tuple[int, ...]:
    """``counts`` must give one non-negative element count per rank of ``comm``."""
    values = _integers(counts, comm, name, "element counts")
    for i, value in enumerate(values):
        if value < 0:
            raise ArgumentError(f"{name}: expected non-negative element counts, got {value} "
                                f"for rank {i}")
    return values


def displs_arg(displs: object, counts: tuple[int, ...], comm: Communicator,
               name: str) -> tuple[int, ...]:
    """Element offsets, one per rank; ``None`` means packed blocks (exclusive prefix sum)."""
    if displs is None:
        return tuple(itertools.accumulate(counts[:-1], initial=0))
    values = _integers(displs, comm, name, "element offsets")
    for i, value in enumerate(values):
        if value < 0:
            raise ArgumentError(f"{name}: expected non-negative element offsets, got {value} "
                                f"for rank {i}")
    return values


def layout_extent(counts: tuple[int, ...], displs: tuple[int, ...]) -> int:
    """Elements a buffer needs to hold every non-empty block of a counts/displs layout."""
    return max((d + c for c, d in zip(counts, displs) if c), default=0)


def disjoint_layout(counts: tuple[int, ...], displs: tuple[int, ...], name: str) -> None:
    """The blocks of a receive layout must not overlap (MPI forbids writing one twice)."""
    blocks = sorted((d, d + c, rank) for rank, (c, d) in enumerate(zip(counts, displs)) if c)
    for (start_a, end_a, rank_a), (start_b, end_b, rank_b) in zip(blocks, blocks[1:]):
        if start_b < end_a:
            raise ArgumentError(f"{name}: the blocks of ranks {rank_a} and {rank_b} overlap "
                                f"(elements [{start_a}, {end_a}) and [{start_b}, {end_b})); "
                                f"receive blocks must be disjoint")


def _integers(values: object, comm: Communicator, name: str, what: str) -> tuple[int, ...]:
    try:
        result = tuple(operator.index(v) for v in values)
    except TypeError:
        raise ArgumentError(f"{name}: expected a sequence of {comm.size} integer {what} "
                            f"(one per rank), got {values!r}") from None
    if len(result) != comm.size:
        raise ArgumentError(f"{name}: expected {comm.size} {what} (one per rank), got "
                            f"{len(result)}")
    return result


def rank_in_range(value: object, comm: Communicator, name: str) -> int:
    """``value`` must be an integer rank of ``comm``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name}: expected an integer rank in [0, {comm.size}), "
                            f"got {value!r}")
    if not 0 <= value < comm.size:
        raise ArgumentError(f"{name}: expected a rank in [0, {comm.size}), got {value}")
    return int(value)


def check_stream(stream: object, comm: Communicator):
    """The stream to order on: ``stream`` or the communicator's; host-only backends take none."""
    if stream is None:
        return comm._stream
    if not comm.backend.uses_streams:
        raise ArgumentError(f"stream: the {comm.backend.name} backend runs on the host and "
                            f"takes no stream, got {type(stream).__name__}; use "
                            f"al.HostTransferCommunicator for stream-ordered operations")
    return stream
