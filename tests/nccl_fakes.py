"""Stand-ins that let the NCCL backend's operations run without a GPU, on one rank.

``FakeNccl`` plays ``cupy.cuda.nccl`` (the communicator and ``groupStart``/``groupEnd``) on
host memory: it records every call and performs it on the host stream it is handed, as a
one-rank NCCL would.  ``HostDeviceOps`` plays backends/nccl/device.py on host streams.
``fake_nccl_communicator`` builds an ``al.NCCLCommunicator`` whose bootstrap installs both;
buffers are host memory exposing ``__cuda_array_interface__`` (providers.FakeCudaArray).
"""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np

import aluminum as al
from aluminum.backends.nccl import bootstrap
from aluminum.backends.nccl.context import NCCLContext
from aluminum.backends.nccl.datatypes import NcclDataType, NcclRedOp
from aluminum.backends.runtime import host_runtime
from aluminum.backends.runtime.host import HostStream

ITEMSIZE = {NcclDataType.INT8: 1, NcclDataType.UINT8: 1, NcclDataType.INT32: 4,
            NcclDataType.UINT32: 4, NcclDataType.INT64: 8, NcclDataType.UINT64: 8,
            NcclDataType.FLOAT16: 2, NcclDataType.FLOAT32: 4, NcclDataType.FLOAT64: 8,
            NcclDataType.BFLOAT16: 2}


def host_view(ptr: int, count: int, dtype) -> np.ndarray:
    """A numpy array over ``count`` elements of ``dtype`` at host address ``ptr``."""
    dtype = np.dtype(dtype)
    if count == 0:
        return np.empty(0, dtype)
    raw = (ctypes.c_ubyte * (count * dtype.itemsize)).from_address(ptr)
    return np.ctypeslib.as_array(raw).view(dtype)


def _move(dst: int, src: int, nbytes: int) -> None:
    if nbytes:
        ctypes.memmove(dst, src, nbytes)


class FakeNccl:
    """A one-rank NCCL communicator and group API over host memory and host streams."""

    def __init__(self, size: int = 1, unique_id=b"", rank: int = 0) -> None:
        assert size == 1 and rank == 0, "the fake runs one rank"
        self.unique_id = unique_id
        self.calls: list[tuple] = []
        self.destroyed = False
        self._depth = 0
        self._pending: list[tuple] = []
        # Self messages not yet matched: ("send" | "recv", address, nbytes), in posting order.
        self._mailbox: list[tuple[str, int, int]] = []

    # -- group API -------------------------------------------------------------------------
    def groupStart(self) -> None:
        self._depth += 1

    def groupEnd(self) -> None:
        self._depth -= 1
        if not self._depth:
            pending, self._pending = self._pending, []
            for call in pending:
                self._run(*call)

    # -- communicator ----------------------------------------------------------------------
    def allReduce(self, send, recv, count, datatype, op, stream):
        self._call("allReduce", send, recv, count, NcclDataType(datatype), NcclRedOp(op), stream)

    def reduce(self, send, recv, count, datatype, op, root, stream):
        assert root == 0
        self._call("reduce", send, recv, count, NcclDataType(datatype), NcclRedOp(op), root,
                   stream)

    def reduceScatter(self, send, recv, recvcount, datatype, op, stream):
        self._call("reduceScatter", send, recv, recvcount, NcclDataType(datatype),
                   NcclRedOp(op), stream)

    def allGather(self, send, recv, count, datatype, stream):
        self._call("allGather", send, recv, count, NcclDataType(datatype), stream)

    def broadcast(self, send, recv, count, datatype, root, stream):
        assert root == 0
        self._call("broadcast", send, recv, count, NcclDataType(datatype), root, stream)

    def send(self, ptr, count, datatype, peer, stream):
        assert peer == 0
        self._call("send", ptr, count, NcclDataType(datatype), peer, stream)

    def recv(self, ptr, count, datatype, peer, stream):
        assert peer == 0
        self._call("recv", ptr, count, NcclDataType(datatype), peer, stream)

    def destroy(self) -> None:
        self.destroyed = True

    def _call(self, *call) -> None:
        assert isinstance(call[-1], HostStream), f"{call[0]}: stream handle {call[-1]!r}"
        self.calls.append(call)
        if self._depth:
            self._pending.append(call)
        else:
            self._run(*call)

    def _run(self, name, *args):
        stream = args[-1]
        if name in ("send", "recv"):
            # Real NCCL would hang on an ungrouped message to self; the fake plays the peer.
            ptr, count, datatype = args[:3]
            self._match(name, ptr, count * ITEMSIZE[datatype], stream)
            return
        # One rank: a reduction of one contribution is that contribution (AVG divides by 1).
        send, recv, count, datatype = args[:4]
        stream.enqueue(_move, recv, send, count * ITEMSIZE[datatype])

    def _match(self, kind, ptr, nbytes, stream):
        other = "recv" if kind == "send" else "send"
        for i, (waiting, address, size) in enumerate(self._mailbox):
            if waiting == other:
                del self._mailbox[i]
                assert size == nbytes, f"self message of {size} bytes received as {nbytes}"
                dst, src = (address, ptr) if kind == "send" else (ptr, address)
                stream.enqueue(_move, dst, src, nbytes)
                return
        self._mailbox.append((kind, ptr, nbytes))


class HostDeviceOps:
    """backends/nccl/device.py's interface on host memory and host streams."""

    def __init__(self) -> None:
        self.scratch: list[np.ndarray] = []   # never freed: host streams may still use them

    @staticmethod
    def as_stream(stream: object) -> HostStream:
        return host_runtime().as_stream(stream)

    def new_internal_stream(self) -> HostStream:
        return HostStream("AlNcclInternal")

    @staticmethod
    def handle(stream: HostStream) -> HostStream:
        return stream

    def empty(self, nbytes: int, stream: HostStream) -> np.ndarray:
        array = np.empty(max(nbytes, 1), np.uint8)
        self.scratch.append(array)
        return array

    @staticmethod
    def address(array: np.ndarray) -> int:
        return array.ctypes.data

    def copy(self, dst: int, src: int, nbytes: int, stream: HostStream) -> None:
        stream.enqueue(_move, dst, src, nbytes)

    def to_flags(self, src: int, count: int, dtype, stream: HostStream) -> np.ndarray:
        flags = self.empty(count, stream)

        def fill():
            np.not_equal(host_view(src, count, dtype), 0, out=flags[:count].view(np.bool_))

        stream.enqueue(fill)
        return flags

    def from_flags(self, dst: int, dtype, flags: np.ndarray, offset: int, count: int,
                   parity: bool, stream: HostStream) -> None:
        def write():
            result = flags[offset:offset + count]
            if parity:
                result = result & 1
            host_view(dst, count, dtype)[...] = result.astype(dtype)

        stream.enqueue(write)


@contextlib.contextmanager
def fake_nccl_communicator(monkeypatch, stream: HostStream | None = None):
    """An ``al.NCCLCommunicator`` on one rank whose NCCL is a ``FakeNccl``.

    Yields ``(comm, fake)``; the communicator's stream is a host stream.
    """
    fakes = []

    def create_context(size, unique_id, rank):
        fake = FakeNccl(size, unique_id, rank)
        fakes.append(fake)
        return NCCLContext(fake, fake, HostDeviceOps())

    monkeypatch.setattr(bootstrap, "nccl_problem", lambda: None)
    monkeypatch.setattr(bootstrap, "get_unique_id", lambda: b"fake-unique-id")
    monkeypatch.setattr(bootstrap, "create_context", create_context)
    stream = stream or HostStream("AlNcclUser")
    comm = al.NCCLCommunicator(stream=stream)
    try:
        yield comm, fakes[0]
    finally:
        comm.free()
        stream.close()
