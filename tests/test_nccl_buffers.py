"""GPU buffers without a GPU: host memory exposing ``__cuda_array_interface__``.

Such a buffer becomes a device ``Buffer`` record; the MPI backend rejects it clearly; the
NCCL backend accepts it and hands NCCL its address, count and type (the NCCL communicator
here is a recording fake, tests/nccl_fakes.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import aluminum as al
from aluminum.backends.nccl.datatypes import BYTES, DATATYPES
from aluminum.core.buffers import CUDA, as_buffer
from nccl_fakes import fake_nccl_communicator
from providers import FakeCudaArray

DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
          np.float16, np.float32, np.float64, al.bfloat16, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(6,), (2, 3), (1, 6, 1)])
def test_fake_cuda_array_becomes_a_device_buffer(dtype, shape):
    array = np.zeros(shape, dtype)
    buf = as_buffer(FakeCudaArray(array), "buf")
    assert (buf.device, buf.count, buf.dtype, buf.array) == (CUDA, 6, np.dtype(dtype), None)
    assert buf.ptr == array.ctypes.data and buf.nbytes == array.nbytes and buf.writable


@pytest.mark.parametrize("call", [
    lambda b, c: al.allreduce(b, c),
    lambda b, c: al.bcast(b, c, root=0),
    lambda b, c: al.allgather(b, c),
    lambda b, c: al.nonblocking_allreduce(b, c),
    lambda b, c: al.send(b, 0, c),
], ids=["allreduce", "bcast", "allgather", "nonblocking_allreduce", "send"])
def test_mpi_communicator_rejects_device_buffers(call):
    array = np.arange(4, dtype=np.float32)
    with al.MPICommunicator() as comm:
        with pytest.raises(al.BufferError, match="buf: the mpi backend needs host memory, got "
                                                 "a CUDA device buffer"):
            call(FakeCudaArray(array), comm)
    np.testing.assert_array_equal(array, np.arange(4))


def test_nccl_communicator_rejects_host_buffers(monkeypatch):
    with fake_nccl_communicator(monkeypatch) as (comm, fake):
        with pytest.raises(al.BufferError, match="buf: the nccl backend needs GPU memory"):
            al.allreduce(np.zeros(4, np.float32), comm)
        with pytest.raises(al.BufferError, match="recvbuf: the nccl backend needs GPU memory"):
            al.allreduce(FakeCudaArray(np.zeros(4, np.float32)), comm,
                         recvbuf=np.zeros(4, np.float32))
        assert fake.calls == []


def test_nccl_communicator_rejects_read_only_and_mismatched_buffers(monkeypatch):
    with fake_nccl_communicator(monkeypatch) as (comm, fake):
        with pytest.raises(al.BufferError, match="buf: expected a writable buffer"):
            al.allreduce(FakeCudaArray(np.zeros(4, np.float32), readonly=True), comm)
        with pytest.raises(al.BufferError, match="recvbuf: expected 4 elements of float32, "
                                                 "got 3 elements of float32"):
            al.allreduce(FakeCudaArray(np.zeros(4, np.float32)), comm,
                         recvbuf=FakeCudaArray(np.zeros(3, np.float32)))
        assert fake.calls == []


@pytest.mark.parametrize("dtype", [d for d in DTYPES if np.dtype(d) in DATATYPES
                                   and np.dtype(d) != np.bool_], ids=lambda d: np.dtype(d).name)
def test_nccl_gets_the_address_count_and_type(monkeypatch, dtype):
    array = np.arange(6).astype(dtype)
    out = np.zeros(6, dtype)
    with fake_nccl_communicator(monkeypatch) as (comm, fake):
        al.allreduce(FakeCudaArray(array), comm, recvbuf=FakeCudaArray(out))
        comm.stream.synchronize()
        name, send, recv, count, datatype, _, stream = fake.calls[0]
        assert (name, send, recv, count) == ("allReduce", array.ctypes.data, out.ctypes.data, 6)
        assert datatype is DATATYPES[np.dtype(dtype)] and stream is comm.stream
    np.testing.assert_array_equal(out, array)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_data_movement_ships_bytes_of_any_dtype(monkeypatch, dtype):
    array = np.arange(6).astype(dtype)
    with fake_nccl_communicator(monkeypatch) as (comm, fake):
        al.bcast(FakeCudaArray(array), comm, root=0)
        comm.stream.synchronize()
        assert fake.calls[0][1:5] == (array.ctypes.data, array.ctypes.data, array.nbytes, BYTES)
