"""The host-transfer backend on a real GPU (cupy arrays, CUDA streams), one rank in process.

Skipped with a reason where ``cupy.is_available()`` is False; the same states run on host
streams in tests/mpi/rank_ht_*.py everywhere.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aluminum as al
from aluminum.backends.ht.staging import staging_pool
from aluminum.backends.runtime import cupy_runtime

try:
    import cupy
except ImportError:
    cupy = None

HAVE_GPU = cupy is not None and cupy.is_available()
pytestmark = pytest.mark.skipif(not HAVE_GPU,
                                reason="cupy.is_available() is False: no usable GPU")

# Spins about ``cycles`` GPU clock cycles, then fills ``x``: a slow producer on the stream.
_SLOW_FILL = r"""
extern "C" __global__ void slow_fill(float* x, int n, float value, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    for (int i = 0; i < n; ++i) x[i] = value;
}
"""


@pytest.fixture(scope="module")
def comm():
    with al.HostTransferCommunicator() as communicator:
        yield communicator


@pytest.fixture()
def stream():
    return cupy.cuda.Stream(non_blocking=True)


def slow_fill(array, value, stream, cycles=200_000_000):
    kernel = cupy.RawKernel(_SLOW_FILL, "slow_fill")
    with stream:
        kernel((1,), (1,), (array, np.int32(array.size), np.float32(value), np.int64(cycles)))


def test_default_stream_is_cupys_current_stream(comm):
    assert isinstance(comm.stream, cupy_runtime.CupyStream)
    assert comm.stream.ptr == cupy.cuda.get_current_stream().ptr


@pytest.mark.parametrize("op", [al.SUM, al.MAX, al.AVG])
def test_allreduce_in_place_on_the_communicator_stream(comm, op):
    x = cupy.arange(1000, dtype=cupy.float32)
    al.allreduce(x, comm, op=op)
    comm.stream.synchronize()
    np.testing.assert_array_equal(x.get(), np.arange(1000, dtype=np.float32))


def test_logical_op_yields_zero_or_one(comm):
    x = cupy.asarray([0, 3, -2, 0], dtype=cupy.int32)
    al.nonblocking_allreduce(x, comm, op=al.LOR).wait()
    np.testing.assert_array_equal(x.get(), [0, 1, 1, 0])


def test_out_of_place_on_a_per_call_stream(comm, stream):
    x = cupy.arange(4096, dtype=cupy.float64)
    y = cupy.zeros_like(x)
    al.allreduce(x, comm, stream, recvbuf=y)
    stream.synchronize()
    np.testing.assert_array_equal(y.get(), x.get())


def test_slow_producer_and_consumer_on_the_stream(comm, stream):
    x = cupy.zeros(1 << 16, dtype=cupy.float32)
    slow_fill(x, 5.0, stream)                 # the input exists only after the kernel
    al.allreduce(x, comm, stream)             # returns at once: stream-ordered
    seen = cupy.empty_like(x)
    with stream:
        seen[...] = x                         # reads the result in stream order
        x.fill(-1)                            # and reuses the buffer at once
    stream.synchronize()
    assert bool((seen == 5.0).all())


def test_nonblocking_wait_blocks_the_host_until_done(comm, stream):
    x = cupy.zeros(1 << 16, dtype=cupy.float32)
    slow_fill(x, 2.0, stream)
    request = al.nonblocking_allreduce(x, comm, stream)
    request.wait()
    assert bool((x == 2.0).all())


def test_wait_on_stream_orders_another_stream(comm, stream):
    other = cupy.cuda.Stream(non_blocking=True)
    x = cupy.zeros(1 << 16, dtype=cupy.float32)
    slow_fill(x, 3.0, stream)
    request = al.nonblocking_allreduce(x, comm, stream)
    request.wait_on_stream(other)             # does not block the host
    with other:
        seen = x.copy()
    other.synchronize()
    assert bool((seen == 3.0).all())
    request.wait()


def test_data_movement_and_point_to_point(comm):
    x = cupy.arange(12, dtype=cupy.int64)
    y = cupy.zeros(12, dtype=cupy.int64)
    al.allgather(x, comm, recvbuf=y)
    al.bcast(y, comm, root=0)
    z = cupy.zeros(12, dtype=cupy.int64)
    al.sendrecv(y, 0, z, 0, comm)
    w = cupy.zeros(12, dtype=cupy.int64)
    al.alltoall(z, comm, recvbuf=w)
    comm.stream.synchronize()
    np.testing.assert_array_equal(w.get(), np.arange(12))


def test_staging_comes_from_the_pinned_pool(comm):
    x = cupy.ones(1000, dtype=cupy.float32)
    al.nonblocking_allreduce(x, comm).wait()
    pool = staging_pool(comm)
    allocated = pool.allocated
    for _ in range(3):
        al.nonblocking_allreduce(x, comm).wait()
    assert pool.allocated == allocated


# A kernel loaded for the first time while an HT operation's stream waits on its flag: the
# load blocks its thread until the flag is set, and the progress engine sets it, so the engine
# must get to run meanwhile.  In a child process so that a deadlock fails instead of hanging.
_FRESH_KERNEL_DURING_HT = textwrap.dedent(f"""
    import cupy, numpy as np
    import aluminum as al
    slow = cupy.RawKernel({_SLOW_FILL!r}, "slow_fill")
    x = cupy.zeros(1 << 20, dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with al.HostTransferCommunicator() as comm:
        with stream:
            slow((1,), (1,), (x, np.int32(x.size), np.float32(2), np.int64(200_000_000)))
        request = al.nonblocking_allreduce(x, comm, stream)
        fresh = cupy.ElementwiseKernel("float32 a", "float32 b", "b = a * 7.0f + 1.0f",
                                       "al_test_fresh_kernel")
        y = fresh(cupy.ones(4, dtype=cupy.float32))
        request.wait()
        stream.synchronize()
        assert float(y[0].get()) == 8.0 and bool((x == 2.0).all())
    print("ok")
""")


def test_first_launch_of_a_kernel_while_an_ht_op_waits_does_not_deadlock():
    done = subprocess.run([sys.executable, "-c", _FRESH_KERNEL_DURING_HT],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr


_ABANDONED_RECV = textwrap.dedent("""
    import warnings
    import numpy as np
    import aluminum as al
    al.init()
    comm = al.HostTransferCommunicator()
    buf = np.zeros(4, np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        al.recv(buf, 0, comm)            # from itself, and no send: pending forever
        al.finalize()
        comm.stream.synchronize()        # returns: the parked CUDA stream was released
    print("released")
    for warning in caught:
        print("warning:", warning.message)
""")


def test_finalize_releases_a_cuda_stream_parked_on_an_abandoned_ht_operation():
    """The CUDA-stream side of tests/test_engine.py's host-stream test: a CUDA stream cannot
    carry the error, so the failure is a warning, and the stream must not stay parked."""
    done = subprocess.run([sys.executable, "-c", _ABANDONED_RECV], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "AL_TIMEOUT": "0.5"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "released" in done.stdout, done.stdout + done.stderr
    assert "warning: aluminum: blocking recv/host_transfer failed on the progress engine: " \
        "TimeoutError" in done.stdout, done.stdout + done.stderr
