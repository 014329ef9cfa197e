"""All 18 NCCL-backend operations on one rank, without a GPU.

The NCCL communicator is a ``FakeNccl`` and device memory is host memory exposing
``__cuda_array_interface__`` (tests/nccl_fakes.py), so what runs is the backend's own code:
argument handling, pointer arithmetic, in-place rules, grouping, scratch copies, the logical
reductions' emulation, and the stream choreography of blocking and nonblocking calls.
"""
from __future__ import annotations

import numpy as np
import pytest

import aluminum as al
from aluminum.backends.nccl.datatypes import BYTES, NcclDataType, NcclRedOp
from aluminum.backends.runtime import host_runtime
from nccl_fakes import fake_nccl_communicator
from providers import FakeCudaArray


@pytest.fixture
def nccl(monkeypatch):
    with fake_nccl_communicator(monkeypatch) as pair:
        yield pair


def dev(array):
    return FakeCudaArray(array)


def run(blocking, name, *args, **kwargs):
    """Run ``al.<name>`` blocking, or nonblocking and wait; then let the streams drain."""
    comm = next(a for a in args if isinstance(a, al.NCCLCommunicator))
    if blocking:
        getattr(al, name)(*args, **kwargs)
    else:
        getattr(al, "nonblocking_" + name)(*args, **kwargs).wait(timeout=10)
    comm.stream.synchronize()


X = np.arange(1, 7, dtype=np.float32)


def out_like(n, dtype=np.float32):
    return np.full(n, -1, dtype)


BLOCKING = pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])


@BLOCKING
@pytest.mark.parametrize("op", [al.SUM, al.PROD, al.MIN, al.MAX, al.AVG])
def test_allreduce(nccl, blocking, op):
    comm, fake = nccl
    buf, out = X.copy(), out_like(6)
    run(blocking, "allreduce", dev(buf), comm, op=op)
    run(blocking, "allreduce", dev(buf), comm, op=op, recvbuf=dev(out))
    np.testing.assert_array_equal(buf, X)
    np.testing.assert_array_equal(out, X)
    in_place, out_of_place = [c for c in fake.calls if c[0] == "allReduce"]
    ptr = buf.ctypes.data
    assert in_place[1:6] == (ptr, ptr, 6, NcclDataType.FLOAT32, NcclRedOp[op.name])
    assert out_of_place[1:3] == (ptr, out.ctypes.data)


@BLOCKING
def test_reduce(nccl, blocking):
    comm, fake = nccl
    buf, out = X.copy(), out_like(6)
    run(blocking, "reduce", dev(buf), comm, root=0, op=al.MAX)
    run(blocking, "reduce", dev(buf), comm, root=0, recvbuf=dev(out))
    np.testing.assert_array_equal(out, X)
    assert [c[0] for c in fake.calls] == ["reduce", "reduce"]


@BLOCKING
def test_reduce_scatter(nccl, blocking):
    comm, _ = nccl
    buf, out = X.copy(), out_like(6)
    run(blocking, "reduce_scatter", dev(buf), comm)
    run(blocking, "reduce_scatter", dev(buf), comm, recvbuf=dev(out))
    np.testing.assert_array_equal(buf, X)
    np.testing.assert_array_equal(out, X)


@BLOCKING
def test_reduce_scatterv(nccl, blocking):
    comm, fake = nccl
    buf, out = X.copy(), out_like(6)
    run(blocking, "reduce_scatterv", dev(buf), [6], comm)
    run(blocking, "reduce_scatterv", dev(buf), [6], comm, recvbuf=dev(out))
    np.testing.assert_array_equal(out, X)
    assert [c[0] for c in fake.calls] == ["reduce", "reduce"]


@BLOCKING
def test_allgather_and_allgatherv(nccl, blocking):
    comm, fake = nccl
    buf, out, wide = X.copy(), out_like(6), out_like(8)
    run(blocking, "allgather", dev(buf), comm)
    run(blocking, "allgather", dev(buf), comm, recvbuf=dev(out))
    run(blocking, "allgatherv", dev(buf), [6], [2], comm, recvbuf=dev(wide))
    np.testing.assert_array_equal(out, X)
    np.testing.assert_array_equal(wide, np.r_[-1, -1, X])
    allgather = fake.calls[1]
    assert allgather[:5] == ("allGather", buf.ctypes.data, out.ctypes.data, 24, BYTES)
    assert fake.calls[2][0] == "broadcast"


@BLOCKING
def test_alltoall_and_alltoallv(nccl, blocking):
    comm, _ = nccl
    buf, out, wide = X.copy(), out_like(6), out_like(6)
    run(blocking, "alltoall", dev(buf), comm)
    run(blocking, "alltoall", dev(buf), comm, recvbuf=dev(out))
    run(blocking, "alltoallv", dev(buf), [3], [1], [3], [2], comm, recvbuf=dev(wide))
    np.testing.assert_array_equal(buf, X)
    np.testing.assert_array_equal(out, X)
    np.testing.assert_array_equal(wide, [-1, -1, 2, 3, 4, -1])
    run(blocking, "alltoallv", dev(buf), [3], [1], [3], [1], comm)
    np.testing.assert_array_equal(buf, X)


@BLOCKING
def test_bcast(nccl, blocking):
    comm, fake = nccl
    buf = np.arange(5, dtype=np.int16)   # NCCL has no int16, but a broadcast moves bytes
    run(blocking, "bcast", dev(buf), comm, root=0)
    np.testing.assert_array_equal(buf, np.arange(5))
    assert fake.calls[0][3:5] == (10, BYTES)


@BLOCKING
def test_gather_and_gatherv(nccl, blocking):
    comm, _ = nccl
    buf, out, wide = X.copy(), out_like(6), out_like(7)
    run(blocking, "gather", dev(buf), comm, root=0)
    run(blocking, "gather", dev(buf), comm, root=0, recvbuf=dev(out))
    run(blocking, "gatherv", dev(buf), [6], [1], comm, root=0, recvbuf=dev(wide))
    np.testing.assert_array_equal(buf, X)
    np.testing.assert_array_equal(out, X)
    np.testing.assert_array_equal(wide, np.r_[-1, X])


@BLOCKING
def test_scatter_and_scatterv(nccl, blocking):
    comm, _ = nccl
    buf, out, part = X.copy(), out_like(6), out_like(3)
    run(blocking, "scatter", dev(buf), comm, root=0)
    run(blocking, "scatter", dev(buf), comm, root=0, recvbuf=dev(out))
    run(blocking, "scatterv", dev(buf), [3], [2], comm, root=0, recvbuf=dev(part))
    np.testing.assert_array_equal(buf, X)
    np.testing.assert_array_equal(out, X)
    np.testing.assert_array_equal(part, X[2:5])


@BLOCKING
def test_barrier_is_a_one_word_allreduce(nccl, blocking):
    comm, fake = nccl
    run(blocking, "barrier", comm)
    (call,) = fake.calls
    assert call[0] == "allReduce" and call[3:6] == (1, NcclDataType.INT32, NcclRedOp.SUM)


@BLOCKING
def test_point_to_point(nccl, blocking):
    comm, fake = nccl
    buf, out, a, b = X.copy(), out_like(6), out_like(6), out_like(2, np.int64)
    pair = np.array([7, 8], np.int64)
    run(blocking, "send", dev(buf), 0, comm)
    run(blocking, "recv", dev(out), 0, comm)
    np.testing.assert_array_equal(out, X)
    run(blocking, "sendrecv", dev(buf), 0, dev(a), 0, comm)
    run(blocking, "sendrecv", dev(buf), 0, dev(buf), 0, comm)
    run(blocking, "multisendrecv", [(dev(buf), 0), (dev(pair), 0)],
        [(dev(out), 0), (dev(b), 0)], comm)
    np.testing.assert_array_equal(a, X)
    np.testing.assert_array_equal(buf, X)
    np.testing.assert_array_equal(b, pair)
    assert ("send", buf.ctypes.data, 24, BYTES, 0) == fake.calls[0][:5]


@BLOCKING
@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint8, np.int64, np.bool_])
def test_logical_ops_are_emulated_on_zero_one_bytes(nccl, blocking, dtype):
    comm, fake = nccl
    values = np.array([0, 3, -1, 2, 0, 1]).astype(dtype)
    truth = (values != 0).astype(dtype)
    ops = [al.LOR, al.LAND, al.LXOR]
    if dtype == np.bool_:
        ops += [al.BOR, al.BAND, al.BXOR]
    for op in ops:
        buf, out = values.copy(), np.full(6, 5, dtype)
        run(blocking, "allreduce", dev(buf), comm, op=op)
        run(blocking, "allreduce", dev(values), comm, op=op, recvbuf=dev(out))
        np.testing.assert_array_equal(buf, truth, err_msg=op.name)
        np.testing.assert_array_equal(out, truth, err_msg=op.name)
    used = {c[5] for c in fake.calls}
    assert {c[4] for c in fake.calls} == {NcclDataType.UINT8}
    assert used == {NcclRedOp.MAX, NcclRedOp.MIN, NcclRedOp.SUM}


def test_logical_reduce_scatter_in_place_keeps_the_block_at_the_front(nccl):
    comm, _ = nccl
    buf = np.array([0, 4, 0], np.int32)
    al.reduce_scatter(dev(buf), comm, op=al.LOR)
    al.reduce(dev(buf), comm, op=al.LXOR)
    comm.stream.synchronize()
    np.testing.assert_array_equal(buf, [0, 1, 0])


def test_nonblocking_waits_for_the_callers_stream(nccl):
    """The internal stream must not read the buffer before the caller's stream produced it."""
    comm, _ = nccl
    buf, out = np.zeros(4, np.float32), out_like(4)
    comm.stream.enqueue_sleep(0.05)
    comm.stream.enqueue(buf.fill, 9.0)
    req = al.nonblocking_allreduce(dev(buf), comm, recvbuf=dev(out))
    req.wait(timeout=10)
    np.testing.assert_array_equal(out, 9.0)


def test_wait_on_stream_orders_the_stream_without_blocking_the_host(nccl):
    comm, _ = nccl
    gate = comm.stream  # the user's stream: stalled, so the op cannot finish yet
    release = host_runtime().new_flag()
    buf, out = X.copy(), out_like(6)
    gate.wait_flag(release)
    req = al.nonblocking_allreduce(dev(buf), comm, recvbuf=dev(out))
    seen = []
    req.wait_on_stream()                      # returns at once: the host is not blocked
    gate.enqueue(lambda: seen.append(out.copy()))
    assert not req.test()
    release.set()
    gate.synchronize()
    req.wait(timeout=10)
    np.testing.assert_array_equal(seen[0], X)


def test_per_call_stream_is_used(nccl):
    comm, fake = nccl
    other = host_runtime().new_stream()
    buf = X.copy()
    try:
        al.allreduce(dev(buf), comm, other)
        other.synchronize()
        assert fake.calls[0][-1] is other
    finally:
        other.close()


def test_freed_communicator_destroys_nccl(monkeypatch):
    with fake_nccl_communicator(monkeypatch) as (comm, fake):
        pass
    assert fake.destroyed and fake.unique_id == b"fake-unique-id"
    with pytest.raises(al.CommunicatorError, match="freed"):
        al.allreduce(dev(X.copy()), comm)


def test_cuda_device_ops_reject_streams_that_are_not_cuda_streams():
    pytest.importorskip("cupy", reason="cupy is not installed")
    from aluminum.backends.nccl.device import CupyDeviceOps
    from aluminum.backends.runtime.cupy_runtime import CupyStream

    wrapped = CupyStream(object())
    assert CupyDeviceOps.as_stream(wrapped) is wrapped
    with pytest.raises(al.ArgumentError, match="stream: the nccl backend needs a CUDA stream "
                                               ".*got HostStream"):
        CupyDeviceOps.as_stream(host_runtime().new_stream())


@BLOCKING
@pytest.mark.parametrize("raised", [RuntimeError("NCCL error: unhandled cuda error"),
                                    al.UnsupportedError("op: not here")])
def test_library_errors_surface_as_operation_errors(nccl, blocking, raised):
    """cupy's NcclError and CUDA errors (any Exception) become al.OperationError naming the
    operation, the original chained; aluminum's own errors pass through as they are."""
    comm, fake = nccl

    def fail(*args):
        raise raised
    fake.allReduce = fail            # the instance's own attribute hides the method
    expected = type(raised) if isinstance(raised, al.AluminumError) else al.OperationError
    with pytest.raises(expected) as info:
        run(blocking, "allreduce", dev(X.copy()), comm)
    if expected is al.OperationError:
        assert str(info.value) == "allreduce/nccl: RuntimeError: NCCL error: unhandled cuda error"
        assert info.value.__cause__ is raised
    else:
        assert info.value is raised
    del fake.allReduce
    buf = X.copy()
    run(blocking, "allreduce", dev(buf), comm)     # the communicator is still usable
    np.testing.assert_array_equal(buf, X)
