"""The NCCL backend on a real GPU, one rank (skipped without one).

Run on a GPU machine by ``python bench/gpu.py`` (or plain pytest).  One rank is what one GPU
allows: NCCL refuses two ranks on the same device.
"""
from __future__ import annotations

import numpy as np
import pytest

import aluminum as al

try:
    import cupy
except ImportError:
    cupy = None


def _why_skip() -> str | None:
    if cupy is None:
        return "cupy is not installed"
    if not cupy.is_available():
        return "cupy.is_available() is False: no usable GPU"
    from cupy.cuda import nccl
    if not nccl.available:
        return "cupy.cuda.nccl has no NCCL library"
    return None


REASON = _why_skip()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

REDUCIBLE = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
             np.float32, np.float64]
X = np.arange(1, 7)


@pytest.fixture(scope="module")
def comm():
    with al.NCCLCommunicator() as communicator:
        yield communicator


def sync(comm):
    comm.stream.synchronize()


@pytest.mark.parametrize("dtype", REDUCIBLE, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", [al.SUM, al.PROD, al.MIN, al.MAX, al.AVG])
def test_allreduce_one_rank(comm, dtype, op):
    host = X.astype(dtype)
    buf, out = cupy.asarray(host), cupy.zeros(6, dtype)
    al.allreduce(buf, comm, op=op)
    al.allreduce(buf, comm, op=op, recvbuf=out)
    sync(comm)
    np.testing.assert_array_equal(buf.get(), host)
    np.testing.assert_array_equal(out.get(), host)


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", [al.LOR, al.LAND, al.LXOR])
def test_logical_allreduce_is_zero_one(comm, dtype, op):
    host = np.array([0, 3, 0, 1, 2, 0]).astype(dtype)
    buf = cupy.asarray(host)
    al.allreduce(buf, comm, op=op)
    sync(comm)
    np.testing.assert_array_equal(buf.get(), (host != 0).astype(dtype))


def test_bfloat16_allreduce(comm):
    host = np.arange(8).astype(al.bfloat16)
    buf = cupy.asarray(host.view(np.uint16)).view(cupy.uint16)

    class BF16:   # cupy has no bfloat16 dtype: describe the memory through the interface
        __cuda_array_interface__ = {**buf.__cuda_array_interface__, "typestr": "<V2",
                                    "descr": [("bf16", "<V2")]}

    al.allreduce(BF16(), comm, op=al.SUM)
    sync(comm)
    np.testing.assert_array_equal(buf.get().view(al.bfloat16), host)


def test_every_operation_one_rank(comm):
    x = cupy.arange(1, 7, dtype=cupy.float32)
    host = x.get()

    def fresh(n=6):
        return cupy.full(n, -1, cupy.float32)

    results = {}
    for name, call in {
        "reduce": lambda o: al.reduce(x, comm, root=0, recvbuf=o),
        "reduce_scatter": lambda o: al.reduce_scatter(x, comm, recvbuf=o),
        "reduce_scatterv": lambda o: al.reduce_scatterv(x, [6], comm, recvbuf=o),
        "allgather": lambda o: al.allgather(x, comm, recvbuf=o),
        "allgatherv": lambda o: al.allgatherv(x, [6], [0], comm, recvbuf=o),
        "alltoall": lambda o: al.alltoall(x, comm, recvbuf=o),
        "alltoallv": lambda o: al.alltoallv(x, [6], [0], [6], [0], comm, recvbuf=o),
        "gather": lambda o: al.gather(x, comm, root=0, recvbuf=o),
        "gatherv": lambda o: al.gatherv(x, [6], [0], comm, root=0, recvbuf=o),
        "scatter": lambda o: al.scatter(x, comm, root=0, recvbuf=o),
        "scatterv": lambda o: al.scatterv(x, [6], [0], comm, root=0, recvbuf=o),
        "sendrecv": lambda o: al.sendrecv(x, 0, o, 0, comm),
        "multisendrecv": lambda o: al.multisendrecv([(x, 0)], [(o, 0)], comm),
    }.items():
        out = fresh()
        call(out)
        results[name] = out
    al.bcast(x, comm, root=0)
    al.barrier(comm)
    in_place = x.copy()
    al.alltoall(in_place, comm)
    al.sendrecv(in_place, 0, in_place, 0, comm)
    sync(comm)
    for name, out in results.items():
        np.testing.assert_array_equal(out.get(), host, err_msg=name)
    np.testing.assert_array_equal(in_place.get(), host)


def test_nonblocking_wait_and_wait_on_stream(comm):
    """The op waits for the caller's stream; wait_on_stream does not block the host."""
    from aluminum.backends.runtime import cuda_runtime

    runtime = cuda_runtime()
    user, after = runtime.new_stream(), runtime.new_stream()
    bound = comm.copy(user)
    buf, out = cupy.zeros(1 << 20, cupy.float32), cupy.zeros(1 << 20, cupy.float32)
    cupy.cuda.get_current_stream().synchronize()
    # Load the kernels used below now: a kernel's first launch blocks while a stream waits
    # on a flag (see cupy_runtime), and only this thread sets the flag.
    with user.cupy_stream:
        buf.fill(1)
    with after.cupy_stream:
        out * 2
    release = runtime.new_flag()
    try:
        user.wait_flag(release)                       # the user's stream stalls here
        with user.cupy_stream:
            buf.fill(3)
        req = al.nonblocking_allreduce(buf, bound, recvbuf=out)
        req.wait_on_stream(after)                     # returns while the op cannot run yet
        with after.cupy_stream:
            seen = out * 2
        assert not req.test()
        release.set()
        req.wait(timeout=30)
        after.synchronize()
        assert float(out[0].get()) == 3 and float(seen[-1].get()) == 6
        assert req.state.completion_event().done
    finally:
        release.set()   # an unset flag would stall the GPU for good
        user.synchronize()
        bound.free()


def test_torch_cuda_tensors(comm):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    tensor = torch.arange(8, dtype=torch.float32, device="cuda")
    al.allreduce(tensor, comm, op=al.MAX)
    sync(comm)
    assert tensor.cpu().tolist() == list(range(8))
