"""CUDA runtime over cupy: GPU-free checks always run; stream behaviour needs a GPU."""
from __future__ import annotations

import time

import numpy as np
import pytest

from aluminum.backends import runtime
from aluminum.backends.runtime import cupy_runtime, host

try:
    import cupy
except ImportError:
    cupy = None

HAVE_GPU = cupy is not None and cupy.is_available()
needs_cupy = pytest.mark.skipif(cupy is None, reason="cupy is not installed")
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="cupy.is_available() is False: no usable GPU")
DONE = 10.0
HOLD = 0.05


class FakeDeviceArray:
    """Host memory exposing ``__cuda_array_interface__``, to reach GPU code paths without one."""

    def __init__(self, array: np.ndarray, readonly: bool = False):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str, "version": 3,
            "strides": None if array.flags.c_contiguous else array.strides,
            "data": (array.__array_interface__["data"][0], readonly),
        }


class TorchLikeStream:
    """Anything with an int ``cuda_stream`` handle, as torch.cuda.Stream has."""

    def __init__(self, handle: int):
        self.cuda_stream = handle


class ProtocolStream:
    """A foreign stream speaking the CUDA stream protocol (``__cuda_stream__``)."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class FakeStream:
    ptr = 0


def test_module_imports_and_runtime_exists_without_a_gpu():
    rt = runtime.cuda_runtime()
    assert isinstance(rt, runtime.DeviceRuntime)
    assert rt is cupy_runtime.RUNTIME and rt.name == "cupy"
    assert rt.is_available() == HAVE_GPU


def test_runtime_for_recognises_cuda_streams_without_touching_the_gpu():
    assert runtime.runtime_for(TorchLikeStream(1234)) is runtime.cuda_runtime()
    assert runtime.runtime_for(host.HostStream()) is runtime.host_runtime()
    assert not cupy_runtime.is_cuda_stream(host.HostStream())


@needs_cupy
def test_as_stream_wraps_cupy_and_foreign_handles_equal_by_handle():
    rt = runtime.cuda_runtime()
    a = rt.as_stream(ProtocolStream(0x1234))
    b = rt.as_stream(TorchLikeStream(0x1234))
    c = rt.as_stream(TorchLikeStream(0x5678))
    assert a.ptr == 0x1234 and a == b and hash(a) == hash(b) and a != c
    assert rt.as_stream(a) is a
    assert rt.as_stream(a.cupy_stream) == a
    assert runtime.runtime_for(ProtocolStream(7)) is rt
    assert runtime.runtime_for(a.cupy_stream) is rt


@needs_cupy
def test_as_stream_rejects_host_streams():
    with pytest.raises(TypeError, match="stream: expected a cupy stream"):
        runtime.cuda_runtime().as_stream(host.HostStream())


@pytest.mark.parametrize("dst, src, message", [
    (FakeDeviceArray(np.zeros(4, np.float32)), np.zeros(3, np.float32),
     "dst: expected 12 bytes"),
    (FakeDeviceArray(np.zeros(8)[::2]), np.zeros(4), "dst: expected a C-contiguous"),
    (np.zeros(4), FakeDeviceArray(np.zeros((4, 2))[:, 1]), "src: expected a C-contiguous"),
    (FakeDeviceArray(np.zeros(4), readonly=True), np.zeros(4), "dst: expected a writable"),
])
def test_copy_async_checks_arguments_before_any_cuda_call(dst, src, message):
    with pytest.raises(ValueError, match=message):
        runtime.cuda_runtime().copy_async(dst, src, FakeStream())


def test_wait_flag_rejects_host_flags_before_any_cuda_call():
    stream = cupy_runtime.CupyStream(cupy_stream=FakeStream())
    with pytest.raises(TypeError, match="flag: expected a CupyStreamFlag"):
        stream.wait_flag(host.HostStreamFlag())


@needs_gpu
def test_copies_round_trip_through_pinned_memory_in_order():
    rt = runtime.cuda_runtime()
    stream = rt.new_stream()
    src = np.random.default_rng(3).standard_normal(4096).astype(np.float32)
    pinned = rt.alloc_pinned(src.shape, src.dtype)
    pinned[:] = src
    device = cupy.empty(src.shape, src.dtype)
    back = rt.alloc_pinned(src.shape, src.dtype)
    rt.copy_async(device, pinned, stream)
    rt.copy_async(back, device, stream)
    stream.synchronize()
    np.testing.assert_array_equal(back, src)


@needs_gpu
def test_flag_blocks_the_stream_until_the_host_sets_it():
    rt = runtime.cuda_runtime()
    stream = rt.new_stream()
    pinned = rt.alloc_pinned(256, np.int64)
    pinned[:] = np.arange(256)
    device = cupy.zeros(256, np.int64)
    flag = rt.new_flag()
    stream.wait_flag(flag)
    rt.copy_async(device, pinned, stream)
    done = stream.record_event()
    time.sleep(HOLD)
    assert not done.query() and not flag.is_set()
    flag.set()
    done.synchronize()
    assert done.query()
    np.testing.assert_array_equal(cupy.asnumpy(device), np.arange(256))


@needs_gpu
def test_wait_event_orders_one_stream_after_another():
    rt = runtime.cuda_runtime()
    first, second = rt.new_stream(), rt.new_stream()
    assert first != second
    flag = rt.new_flag()
    first.wait_flag(flag)
    second.wait_event(first.record_event())
    after = second.record_event()
    time.sleep(HOLD)
    assert not after.query()
    flag.set()
    after.synchronize()
    assert after.query()


@needs_gpu
def test_host_stream_can_wait_on_a_cuda_event():
    rt = runtime.cuda_runtime()
    cuda_stream = rt.new_stream()
    flag = rt.new_flag()
    cuda_stream.wait_flag(flag)
    out = []
    with host.HostStream() as host_stream:
        host_stream.wait_event(cuda_stream.record_event())
        host_stream.enqueue(out.append, "after gpu")
        time.sleep(HOLD)
        assert out == []
        flag.set()
        host_stream.synchronize(timeout=DONE)
    assert out == ["after gpu"]


@needs_gpu
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (1, 4, 1)])
@pytest.mark.parametrize("dtype", [np.int8, np.uint64, np.float16, np.float32, np.bool_])
def test_cupy_arrays_are_described_as_their_interface_says(shape, dtype):
    """cupy arrays are read from their attributes: the same description as an object
    offering only the array's ``__cuda_array_interface__`` gets."""
    from aluminum.core.buffers import as_buffer

    class InterfaceOnly:
        def __init__(self, array):
            self.__cuda_array_interface__ = array.__cuda_array_interface__

    array = cupy.zeros(shape, dtype)
    fields = ("address", "dtype", "count", "device", "writable")
    fast = as_buffer(array, "buf")
    slow = as_buffer(InterfaceOnly(array), "buf")
    assert [getattr(fast, f) for f in fields] == [getattr(slow, f) for f in fields]
    assert fast.obj is array


@needs_gpu
@pytest.mark.parametrize("view", [lambda a: a[:, ::2], lambda a: a.T, lambda a: a[::-1]])
def test_non_contiguous_cupy_views_are_rejected(view):
    from aluminum import BufferError
    from aluminum.core.buffers import as_buffer

    with pytest.raises(BufferError, match="recvbuf: expected a C-contiguous device buffer"):
        as_buffer(view(cupy.zeros((4, 6), cupy.float32)), "recvbuf")


_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


@needs_gpu
def test_stream_and_event_synchronize_take_a_timeout_as_host_ones_do():
    stream = cupy_runtime.RUNTIME.new_stream()
    with stream.cupy_stream:
        cupy.RawKernel(_SPIN, "spin")((1,), (1,), (np.int64(2_000_000_000),))   # ~1 s
    event = stream.record_event()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"stream: .* not idle after 0.05 s"):
        stream.synchronize(timeout=0.05)
    with pytest.raises(TimeoutError, match="event: not complete after 0.05 s"):
        event.synchronize(timeout=0.05)
    assert time.monotonic() - start < 0.6
    assert not event.query()
    stream.synchronize(timeout=30)
    assert event.query()
    event.synchronize(timeout=0)          # already passed: returns at once
