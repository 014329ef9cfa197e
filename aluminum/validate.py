"""Argument checks shared by every public operation.

Each check raises an ``AluminumError`` subclass whose message names the argument and says what
was expected and what was given.  Checks run before anything is written, so a rejected call
leaves user buffers untouched and the communicator usable.
"""
from __future__ import annotations

import numpy as np

from .buffers import HOST, Buffer, as_buffer
from .communicator import Communicator
from .errors import ArgumentError, BufferError
from .reduction import ReductionOp, as_reduction_op, check_op_for_dtype


def check_comm(comm: object) -> Communicator:
    """``comm`` must be a live aluminum communicator."""
    if not isinstance(comm, Communicator):
        raise ArgumentError(f"comm: expected an aluminum communicator (e.g. al.MPICommunicator),"
                            f" got {type(comm).__name__}")
    if comm._mpi is None:
        raise comm.unusable_error()
    return comm


def input_buffer(obj: object, comm: Communicator, name: str = "buf") -> Buffer:
    """A buffer the operation reads, on a device the communicator's backend can use."""
    buf = as_buffer(obj, name)
    if buf.device != HOST and not comm.backend.uses_streams:
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


def expect_at_least(buf: Buffer, count: int, dtype: np.dtype, name: str) -> None:
    """``buf`` must hold at least ``count`` elements of ``dtype``."""
    if buf.dtype != dtype:
        raise BufferError(f"{name}: expected elements of {dtype}, got {buf.describe()}")
    if buf.count < count:
        raise BufferError(f"{name}: expected at least {count} elements of {dtype}, "
                          f"got {buf.describe()}")


def reduction_op(op: object, dtype: np.dtype) -> ReductionOp:
    """Parse ``op`` and check it is defined on ``dtype``."""
    op = as_reduction_op(op)
    check_op_for_dtype(op, dtype)
    return op


def same_or_disjoint(sendbuf: Buffer, recvbuf: Buffer) -> bool:
    """True when ``recvbuf`` is ``sendbuf`` itself (in place); raise on partial overlap."""
    if sendbuf.ptr == recvbuf.ptr and sendbuf.nbytes == recvbuf.nbytes:
        return True
    if sendbuf.device == recvbuf.device and sendbuf.nbytes and recvbuf.nbytes and (
            sendbuf.ptr < recvbuf.ptr + recvbuf.nbytes
            and recvbuf.ptr < sendbuf.ptr + sendbuf.nbytes):
        raise BufferError("recvbuf: overlaps buf without being the same buffer; pass "
                          "recvbuf=None for an in-place operation or use disjoint buffers")
    return False


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

