"""Bad input to allreduce raises the right AluminumError subclass naming the argument,
leaves every user buffer untouched and the communicator usable."""
import numpy as np
import pytest

import aluminum as al
from providers import FakeCudaArray


@pytest.fixture(scope="module")
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


def f32(n=8):
    return np.arange(n, dtype=np.float32)


def readonly(array):
    array.flags.writeable = False
    return array


# Each case: id -> (make arguments (buf, kwargs), expected error type, words in the message).
CASES = {
    "recvbuf dtype differs": (lambda: (f32(), {"recvbuf": np.zeros(8, np.float64)}),
                              al.BufferError, "recvbuf: expected 8 elements of float32"),
    "recvbuf too small": (lambda: (f32(), {"recvbuf": np.zeros(4, np.float32)}),
                          al.BufferError, "recvbuf: expected 8 elements"),
    "recvbuf too large": (lambda: (f32(), {"recvbuf": np.zeros(9, np.float32)}),
                          al.BufferError, "recvbuf: expected 8 elements"),
    "non-contiguous buf": (lambda: (np.zeros(16, np.float32)[::2], {}),
                           al.BufferError, "buf: expected a C-contiguous"),
    "non-contiguous recvbuf": (lambda: (f32(), {"recvbuf": np.zeros(16, np.float32)[::2]}),
                               al.BufferError, "recvbuf: expected a C-contiguous"),
    "fortran-ordered 2-d buf": (lambda: (np.zeros((3, 4), np.float32, order="F"), {}),
                                al.BufferError, "buf: expected a C-contiguous"),
    "read-only buf in place": (lambda: (readonly(f32()), {}),
                               al.BufferError, "buf: expected a writable buffer"),
    "read-only recvbuf": (lambda: (f32(), {"recvbuf": readonly(np.zeros(8, np.float32))}),
                          al.BufferError, "recvbuf: expected a writable buffer"),
    "bytes as in-place buf": (lambda: (b"\x00" * 8, {}),
                              al.BufferError, "buf: expected a writable buffer"),
    "BAND on float": (lambda: (f32(), {"op": al.BAND}), al.UnsupportedError, "op: BAND"),
    "BXOR on float64": (lambda: (np.ones(3), {"op": "bxor"}), al.UnsupportedError, "op: BXOR"),
    "LOR on float": (lambda: (f32(), {"op": al.LOR}), al.UnsupportedError, "op: LOR"),
    "SUM on bool": (lambda: (np.ones(3, bool), {"op": al.SUM}), al.UnsupportedError,
                    "op: SUM is not defined for dtype bool"),
    "AVG on bool": (lambda: (np.ones(3, bool), {"op": al.AVG}), al.UnsupportedError, "op: AVG"),
    "unknown op name": (lambda: (f32(), {"op": "median"}), al.ArgumentError, "op: expected one of"),
    "op of wrong type": (lambda: (f32(), {"op": 3}), al.ArgumentError, "op: expected one of"),
    "unhashable op": (lambda: (f32(), {"op": ["sum"]}), al.ArgumentError, "op: expected one of"),
    "unknown algorithm": (lambda: (f32(), {"algo": "bogus"}), al.UnsupportedError,
                          "algo: allreduce on the mpi backend offers"),
    "GPU buffer on MPI": (lambda: (FakeCudaArray(f32()), {}), al.BufferError,
                          "buf: the mpi backend needs host memory"),
    "GPU recvbuf on MPI": (lambda: (f32(), {"recvbuf": FakeCudaArray(np.zeros(8, np.float32))}),
                           al.BufferError, "recvbuf: the mpi backend needs host memory"),
    "not a buffer (int)": (lambda: (5, {}), al.BufferError, "buf: expected a buffer"),
    "not a buffer (list)": (lambda: ([1.0, 2.0], {}), al.BufferError, "buf: expected a buffer"),
    "not a buffer (None)": (lambda: (None, {}), al.BufferError, "buf: expected a buffer"),
    "recvbuf not a buffer": (lambda: (f32(), {"recvbuf": "out"}), al.BufferError,
                             "recvbuf: expected a buffer"),
    "unsupported dtype complex": (lambda: (np.ones(3, np.complex64), {}), al.BufferError,
                                  "buf: unsupported dtype complex64"),
    "unsupported dtype object": (lambda: (np.array([1, "a"], dtype=object), {}), al.BufferError,
                                 "buf: unsupported dtype object"),
    "unsupported dtype datetime": (lambda: (np.zeros(2, "datetime64[s]"), {}), al.BufferError,
                                   "buf: unsupported dtype"),
    "partially overlapping recvbuf": (lambda: _overlapping(), al.BufferError,
                                      "recvbuf: overlaps buf"),
    "stream on the MPI backend": (lambda: (f32(), {"stream": object()}), al.ArgumentError,
                                  "stream: the mpi backend runs on the host"),
}


def _overlapping():
    base = np.zeros(12, np.float32)
    return base[:8], {"recvbuf": base[4:12]}


@pytest.mark.parametrize("warm", [False, True], ids=["first call", "after valid calls"])
@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_rejected_cleanly(comm, case, warm):
    make, error, words = CASES[case]
    if warm:   # valid calls of the cases' usual shape first: the cached fast path must check too
        al.allreduce(f32(), comm)
        al.allreduce(f32(), comm, recvbuf=np.zeros(8, np.float32))
    buf, kwargs = make()
    snapshots = [_snapshot(x) for x in (buf, kwargs.get("recvbuf"))]
    stream = kwargs.pop("stream", None)
    with pytest.raises(error) as raised:
        al.allreduce(buf, comm, stream, **kwargs)
    assert words in str(raised.value)
    assert isinstance(raised.value, al.AluminumError)
    assert [_snapshot(x) for x in (buf, kwargs.get("recvbuf"))] == snapshots, "buffer changed"
    _assert_usable(comm)


@pytest.mark.parametrize("nonblocking", [False, True])
def test_comm_argument_must_be_a_live_communicator(nonblocking):
    call = al.nonblocking_allreduce if nonblocking else al.allreduce
    with pytest.raises(al.ArgumentError, match="comm: expected an aluminum communicator"):
        call(f32(), "not a communicator")
    comm = al.MPICommunicator()
    comm.free()
    buf = f32()
    with pytest.raises(al.CommunicatorError, match="comm: this MPICommunicator was freed"):
        call(buf, comm)
    np.testing.assert_array_equal(buf, f32())


def _allreduce(path):
    """``al.allreduce``, or a ``nonblocking_allreduce`` waited for, with the algorithm of
    ``path``: the fast paths (passthrough states run arrays directly; shared_memory states
    are built from arrays, without Buffers)."""
    nonblocking, algo = path

    def call(*args, **kwargs):
        if nonblocking:
            al.nonblocking_allreduce(*args, algo=algo, **kwargs).wait()
        else:
            al.allreduce(*args, algo=algo, **kwargs)
    return call


FAST_PATHS = pytest.mark.parametrize(
    "path", [(False, "automatic"), (True, "automatic"), (False, "shared_memory"),
             (True, "shared_memory")],
    ids=["blocking", "nonblocking", "blocking-shared_memory", "nonblocking-shared_memory"])


@FAST_PATHS
def test_freed_comm_after_a_cached_fast_path_call(path):
    allreduce = _allreduce(path)
    comm = al.MPICommunicator()
    buf = f32()
    allreduce(buf, comm)
    allreduce(buf, comm)
    comm.free()
    with pytest.raises(al.CommunicatorError, match="freed"):
        allreduce(buf, comm)


@FAST_PATHS
def test_freed_comm_after_calls_on_new_arrays_of_a_kept_kind(path):
    """New arrays each call run the kept kind's decisions; once the communicator is freed
    they must raise as the first call would, leaving the arrays alone."""
    allreduce = _allreduce(path)
    comm = al.MPICommunicator()
    for _ in range(3):
        allreduce(f32(), comm, recvbuf=f32())
    comm.free()
    buf, out = f32(), np.full(8, 7, np.float32)
    with pytest.raises(al.CommunicatorError, match="freed"):
        allreduce(buf, comm, recvbuf=out)
    np.testing.assert_array_equal(out, np.full(8, 7, np.float32))


@FAST_PATHS
def test_read_only_after_a_cached_fast_path_call(comm, path):
    allreduce = _allreduce(path)
    buf = f32()
    allreduce(buf, comm)
    buf.flags.writeable = False
    with pytest.raises(al.BufferError, match="buf: expected a writable buffer"):
        allreduce(buf, comm)


# numpy 2.5 deprecates setting .shape/.dtype in place; while numpy allows it, repeat calls
# must still see it.
@pytest.mark.filterwarnings("ignore:Setting the (shape|dtype) on a NumPy array:DeprecationWarning")
@FAST_PATHS
def test_changes_to_the_same_arrays_between_repeat_calls_are_seen(comm, path):
    """The fast path remembers the last call's arrays; what numpy lets a user change on an
    existing array must not slip through."""
    allreduce = _allreduce(path)
    buf, out = f32(), np.zeros(8, np.float32)
    for _ in range(2):
        allreduce(buf, comm, recvbuf=out)
    out.flags.writeable = False
    with pytest.raises(al.BufferError, match="recvbuf: expected a writable buffer"):
        allreduce(buf, comm, recvbuf=out)
    out.flags.writeable = True
    out.shape = (2, 4)            # still 8 contiguous elements: fine
    allreduce(buf, comm, recvbuf=out)
    np.testing.assert_array_equal(out.reshape(-1), f32() * comm.size)
    ints = np.arange(8, dtype=np.int32)
    for _ in range(2):
        allreduce(ints, comm, op=al.BAND)
    ints.dtype = np.float32       # the same memory, read as another dtype
    with pytest.raises(al.UnsupportedError, match="op: BAND"):
        allreduce(ints, comm, op=al.BAND)


@FAST_PATHS
def test_none_as_comm_after_the_last_calls_communicator_is_gone(path):
    import gc
    allreduce = _allreduce(path)
    buf = f32()
    gone = al.MPICommunicator()
    for _ in range(2):
        allreduce(buf, gone)
    gone.free()
    del gone
    gc.collect()
    with pytest.raises(al.ArgumentError, match="comm: expected an aluminum communicator"):
        allreduce(buf, None)


@FAST_PATHS
def test_repeat_calls_with_new_arrays_write_the_new_ones(comm, path):
    allreduce = _allreduce(path)
    for value in range(4):        # each iteration's arrays may reuse the last one's memory
        buf, out = np.full(8, value, np.float32), np.zeros(8, np.float32)
        allreduce(buf, comm, recvbuf=out)
        np.testing.assert_array_equal(out, np.full(8, value * comm.size, np.float32))


TORCH_DTYPES = ["float32", "int64", "bfloat16", "bool"]


@FAST_PATHS
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_tensors_take_the_fast_path_and_match_numpy(comm, path, dtype,
                                                          monkeypatch):
    """Once the same tensors came twice (a first call, then a repeat that finds them of a
    kept kind and makes them a remembered call), repeat calls never read the tensors again
    (no ``Tensor.numpy()``: the remembered plan runs), and results are what numpy arrays
    give."""
    torch = pytest.importorskip("torch")
    allreduce = _allreduce(path)
    conversions = []
    to_numpy = torch.Tensor.numpy
    monkeypatch.setattr(torch.Tensor, "numpy",
                        lambda tensor, *a, **k: conversions.append(1) or to_numpy(tensor, *a, **k))
    torch_dtype = getattr(torch, dtype)
    values = torch.tensor([0, 3, 0, 1, 2, 0], dtype=torch.int64).to(torch_dtype)
    if torch_dtype.is_floating_point:
        op, expected = al.SUM, values * comm.size
    else:
        op, expected = al.LOR, (values != 0).to(torch_dtype)   # 0/1 even on one rank
    buf, out = values.clone(), torch.full((6,), 7).to(torch_dtype)
    allreduce(buf, comm, op=op, recvbuf=out)
    inplace = values.clone()
    allreduce(inplace, comm, op=op)
    assert conversions, "the first calls read their tensors by some other way: count that"
    for repeat in range(3):
        if repeat == 1:
            conversions.clear()
        out.fill_(7)
        allreduce(buf, comm, op=op, recvbuf=out)
        assert torch.equal(out, expected) and torch.equal(buf, values)
        inplace.copy_(values)
        allreduce(inplace, comm, op=op)
        assert torch.equal(inplace, expected)
    assert not conversions, "a repeat call on the same tensors read them again"


@FAST_PATHS
def test_torch_tensors_the_views_cannot_take_still_work_or_explain(comm, path):
    torch = pytest.importorskip("torch")
    allreduce = _allreduce(path)
    grad = torch.arange(4, dtype=torch.float32, requires_grad=True)
    for _ in range(2):
        allreduce(grad, comm, op=al.MAX)              # the data, as the full path does
    assert grad.requires_grad and torch.equal(grad.detach(), torch.arange(4.0))
    out = np.full(4, -1, np.float32)                  # a tensor into a numpy array
    tensor_out = torch.full((4,), -1.0)               # and the other way round
    for _ in range(2):
        allreduce(torch.arange(4, dtype=torch.float32), comm, recvbuf=out)
        np.testing.assert_array_equal(out, np.arange(4.0) * comm.size)
        allreduce(np.arange(4, dtype=np.float32), comm, recvbuf=tensor_out)
        assert torch.equal(tensor_out, torch.arange(4.0) * comm.size)
    strided = torch.zeros(8)[::2]
    with pytest.raises(al.BufferError, match="buf: expected a contiguous tensor"):
        allreduce(strided, comm)
    assert torch.equal(strided, torch.zeros(4))


@FAST_PATHS
@pytest.mark.parametrize("op", [al.LOR, al.LAND])
def test_repeat_calls_finish_the_result(comm, path, op):
    """Logical ops give 0/1 even on one rank, where MPI leaves the input as it is: the
    finishing step runs on the first (validating) call and on the repeats that skip it."""
    allreduce = _allreduce(path)
    buf = np.arange(8, dtype=np.int32) * 3
    expected = (buf != 0).astype(np.int32)
    out = np.empty(8, np.int32)
    for _ in range(3):            # the same arrays: the last-call shortcut from the second
        out.fill(-1)
        allreduce(buf, comm, op=op, recvbuf=out)
        np.testing.assert_array_equal(out, expected)
    for _ in range(3):            # new arrays of a known shape: the cached plan
        inplace = buf.copy()
        allreduce(inplace, comm, op=op)
        np.testing.assert_array_equal(inplace, expected)


def _snapshot(obj):
    if obj is None or isinstance(obj, (int, str, list)):
        return repr(obj)
    if isinstance(obj, FakeCudaArray):
        return obj._array.tobytes()
    return np.asarray(memoryview(obj) if not isinstance(obj, np.ndarray) else obj).tobytes()


def _assert_usable(comm):
    buf = f32()
    al.allreduce(buf, comm)
    np.testing.assert_array_equal(buf, f32() * comm.size)
