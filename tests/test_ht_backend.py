"""Host-transfer backend pieces that need one process: registration, the State contract,
staging memory and copy regions, argument errors, and a one-rank smoke run on host streams."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import aluminum as al
from aluminum.backends import get_backend
from aluminum.backends.ht import HOST_TRANSFER_OPS, default_stream
from aluminum.backends.ht.host_transfer import layout_blocks
from aluminum.backends.ht.staging import DeviceRegion, StagingPool, region, staging_pool
from aluminum.backends.mpi.passthrough import PASSTHROUGH_OPS
from aluminum.backends.runtime import host, host_runtime
from aluminum.core.buffers import as_buffer
from providers import FakeCudaArray

try:
    import cupy
except ImportError:
    cupy = None
HAVE_GPU = cupy is not None and cupy.is_available()


@pytest.fixture(scope="module")
def comm():
    with al.HostTransferCommunicator(stream=host.HostStream()) as communicator:
        yield communicator


# -- registration and the State contract --------------------------------------------------


def test_backend_offers_every_operation_of_the_mpi_backend():
    backend = get_backend("ht")
    assert backend.name == "ht" and backend.uses_streams
    assert backend.devices == {"cpu", "cuda"}
    assert set(backend.ops) == set(PASSTHROUGH_OPS) and len(backend.ops) == 18
    assert al.algorithms("allreduce", "ht") == ["host_transfer"]


@pytest.mark.parametrize("op", sorted(HOST_TRANSFER_OPS))
def test_state_takes_the_mpi_backend_arguments(op):
    """The public API builds either backend's State with the same arguments."""
    ht_params = list(inspect.signature(HOST_TRANSFER_OPS[op]).parameters)
    mpi_state = PASSTHROUGH_OPS[op]   # an MPICall takes what its spec's ``arguments`` takes
    mpi_params = list(inspect.signature(getattr(mpi_state, "arguments", mpi_state)).parameters)
    assert ht_params == mpi_params
    assert HOST_TRANSFER_OPS[op].run_type is PASSTHROUGH_OPS[op].run_type
    assert HOST_TRANSFER_OPS[op].name == f"{op}/host_transfer"


@pytest.mark.skipif(HAVE_GPU, reason="with a GPU the default stream is cupy's")
def test_default_stream_without_a_gpu_is_the_host_default_stream():
    assert default_stream() is host_runtime().default_stream()
    with al.HostTransferCommunicator() as communicator:
        assert communicator.stream is host_runtime().default_stream()


# -- staging memory --------------------------------------------------------------------------


def test_pool_reuses_buffers_by_size_class():
    pool = StagingPool()
    raw, view = pool.take(host.RUNTIME, np.dtype(np.float32), 1000)
    assert view.dtype == np.float32 and view.size == 1000 and raw.nbytes == 4096
    pool.give_back([raw], host.RUNTIME)
    again, view = pool.take(host.RUNTIME, np.dtype(np.int16), 2000)   # same 4 KiB class
    assert again is raw and view.size == 2000
    bigger, _ = pool.take(host.RUNTIME, np.dtype(np.uint8), 4097)
    assert bigger.nbytes == 8192 and pool.allocated == 2


def test_pool_keeps_deferred_buffers_until_their_event_completes():
    pool = StagingPool()
    raw, _ = pool.take(host.RUNTIME, np.dtype(np.uint8), 10)
    with host.HostStream() as stream:
        gate = host.HostStreamFlag()
        stream.wait_flag(gate)
        event = stream.record_event()
        pool.give_back_after(event, [raw], host.RUNTIME)
        other, _ = pool.take(host.RUNTIME, np.dtype(np.uint8), 10)
        assert other is not raw               # still owned by the stream
        gate.set()
        event.synchronize(timeout=10)
        again, _ = pool.take(host.RUNTIME, np.dtype(np.uint8), 10)
        assert again is raw


def test_layout_blocks_merge_and_sort():
    assert layout_blocks([2, 3, 0, 1], [0, 2, 9, 7]) == [(0, 5), (7, 1)]
    assert layout_blocks([2, 2], [4, 0]) == [(0, 2), (4, 2)]
    assert layout_blocks([0, 0], [0, 0]) == []
    assert layout_blocks([3, 2], [0, 1]) == [(0, 3)]          # overlapping sends merge


def test_region_of_host_and_device_buffers():
    array = np.arange(10, dtype=np.float64)
    part = region(as_buffer(array), 2, 3)
    np.testing.assert_array_equal(part, [2.0, 3.0, 4.0])
    assert np.shares_memory(part, array)
    fake = FakeCudaArray(array)
    device = region(as_buffer(fake), 2, 3)
    assert isinstance(device, DeviceRegion) and device.owner is fake
    interface = device.__cuda_array_interface__
    assert interface["data"] == (array.ctypes.data + 16, False)
    assert interface["shape"] == (24,) and interface["typestr"] == "|u1"


# -- argument errors leave everything untouched ------------------------------------------------


def test_device_buffer_on_a_host_stream_is_rejected(comm):
    fake = FakeCudaArray(np.ones(4, np.float32))
    with pytest.raises(al.BufferError, match="stream: expected a CUDA stream"):
        al.allreduce(fake, comm)
    buf = np.ones(4, np.float32)
    al.allreduce(buf, comm)                   # the communicator still works
    comm.stream.synchronize(timeout=10)
    np.testing.assert_array_equal(buf, np.ones(4, np.float32))


def test_unknown_stream_is_rejected(comm):
    with pytest.raises(al.ArgumentError, match="stream"):
        al.allreduce(np.ones(4), comm, stream=object())


def test_closed_stream_is_rejected(comm):
    stream = host.HostStream()
    stream.close()
    buf = np.ones(4)
    with pytest.raises(al.ArgumentError, match="closed"):
        al.allreduce(buf, comm, stream=stream)
    al.barrier(comm)
    comm.stream.synchronize(timeout=10)


def test_mpi_communicator_refuses_streams_ht_takes_them(comm):
    stream = host.HostStream()
    with al.MPICommunicator() as mpi:
        with pytest.raises(al.ArgumentError, match="stream"):
            al.allreduce(np.ones(2), mpi, stream=stream)
    buf = np.ones(2)
    al.allreduce(buf, comm, stream=stream)
    stream.synchronize(timeout=10)
    stream.close()


# -- one rank, in process ------------------------------------------------------------------------


def test_blocking_call_returns_before_the_stream_runs(comm):
    gate = host.HostStreamFlag()
    comm.stream.wait_flag(gate)
    buf = np.full(8, 3, np.int32)
    al.allreduce(buf, comm, op=al.AVG)        # would hang here if it waited for the stream
    request = al.nonblocking_bcast(buf, comm)
    assert not request.test()
    gate.set()
    request.wait(timeout=10)
    comm.stream.synchronize(timeout=10)
    np.testing.assert_array_equal(buf, np.full(8, 3, np.int32))


@pytest.mark.parametrize("op", [al.LOR, al.LAND, al.LXOR])
def test_logical_ops_yield_zero_or_one_on_one_rank(comm, op):
    buf = np.array([0, 2, -3, 0], np.int16)
    request = al.nonblocking_allreduce(buf, comm, op=op)
    request.wait(timeout=10)
    np.testing.assert_array_equal(buf, [0, 1, 1, 0])


def test_torch_tensor_on_a_host_stream(comm):
    torch = pytest.importorskip("torch")
    tensor = torch.arange(6, dtype=torch.bfloat16)
    al.allreduce(tensor, comm, op=al.SUM)
    comm.stream.synchronize(timeout=10)
    assert tensor.tolist() == list(range(6))


@pytest.mark.parametrize("value, staged", [("1", True), ("0", False), (None, False)])
def test_stage_host_environment_variable_is_read_per_communicator(monkeypatch, value, staged):
    if value is None:
        monkeypatch.delenv("AL_HT_STAGE_HOST", raising=False)
    else:
        monkeypatch.setenv("AL_HT_STAGE_HOST", value)
    with al.HostTransferCommunicator(stream=host.HostStream()) as communicator:
        buf = np.arange(5.0)
        al.nonblocking_allreduce(buf, communicator).wait(timeout=10)
        assert (staging_pool(communicator).allocated > 0) == staged
        np.testing.assert_array_equal(buf, np.arange(5.0))


def test_blocking_mode_is_checked_and_read_from_the_environment(monkeypatch, comm):
    assert comm.blocking_mode == "stream"
    with pytest.raises(al.ArgumentError, match="blocking_mode.*'stream', 'host'.*'later'"):
        comm.blocking_mode = "later"
    assert comm.blocking_mode == "stream"
    monkeypatch.setenv("AL_HT_BLOCKING", "host")
    with al.HostTransferCommunicator(stream=host.HostStream()) as other:
        assert other.blocking_mode == "host"
        buf = np.arange(5, dtype=np.float64)
        al.allreduce(buf, other)          # one rank: the call itself leaves the data as is
        np.testing.assert_array_equal(buf, np.arange(5))
        other.stream.close(timeout=10)
    monkeypatch.setenv("AL_HT_BLOCKING", "sometimes")
    with pytest.raises(al.ArgumentError, match="AL_HT_BLOCKING.*sometimes"):
        al.HostTransferCommunicator(stream=host.HostStream())


def test_plan_restarts_once_its_last_start_was_handed_to_a_stream():
    """DDP with CUDA buckets never waits on the host: after ``wait_on_stream`` the next start
    is ordered behind the last one by the stream itself.  Without it, restarting raises."""
    with host.HostStream() as stream, \
            al.HostTransferCommunicator(stream=stream) as comm:
        buf = np.arange(6, dtype=np.float64)
        plan = al.allreduce_init(buf, comm, op=al.MAX)
        gate = host.HostStreamFlag()
        stream.wait_flag(gate)             # nothing runs until the gate opens
        first = plan.start()
        with pytest.raises(al.ArgumentError, match="still in flight"):
            plan.start()
        first.wait_on_stream(stream)
        second = plan.start()              # ordered after the first by the stream
        second.wait_on_stream(stream)
        stream.enqueue(buf.__imul__, 2)    # later stream work sees both results
        gate.set()
        stream.synchronize(timeout=30)
        al.wait_all([first, second])
        np.testing.assert_array_equal(buf, np.arange(6) * 2)
        plan.free()
