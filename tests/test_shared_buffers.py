"""``al.shared_empty`` in one process: what it returns, the errors it raises, and what
``comm.free()`` does with buffers still in use (multi-rank behaviour:
tests/mpi/rank_shared_buffers.py)."""
import gc
import warnings

import numpy as np
import pytest

import aluminum as al
from aluminum.backends.mpi.algorithms.shared_buffers import NOT_SHARED, SharedBuffers
from aluminum.backends.runtime.host import HostStream


@pytest.fixture
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


@pytest.mark.parametrize("shape, dtype", [(0, np.float32), (7, np.int16), ((3, 5), np.float64),
                                          ([2, 0, 4], al.bfloat16), ((), np.uint8)])
def test_shared_empty_gives_a_writable_c_contiguous_array(comm, shape, dtype):
    array = al.shared_empty(shape, dtype, comm)
    expected = (shape,) if isinstance(shape, int) else tuple(shape)
    assert (array.shape, array.dtype) == (expected, np.dtype(dtype))
    assert array.flags.c_contiguous and array.flags.writeable
    array[...] = 3
    assert np.all(array == 3)
    registry = SharedBuffers.find(comm)
    assert (registry.locate(array.reshape(-1)) is not None) == (array.size > 0)
    del array
    gc.collect()


def test_allreduce_on_one_rank_leaves_shared_buffers_reduced(comm):
    send, recv = al.shared_empty(1000, np.float32, comm), al.shared_empty(1000, np.float32, comm)
    send[:] = np.arange(1000)
    al.allreduce(send, comm, recvbuf=recv, algo="shared_memory", op=al.AVG)
    np.testing.assert_array_equal(recv, np.arange(1000, dtype=np.float32))
    del send, recv
    gc.collect()


def test_locate_finds_views_inside_a_segment_only(comm):
    array = al.shared_empty(100, np.float64, comm)
    registry = SharedBuffers.find(comm)
    assert registry.locate(array[10:20]) == (0, 80)
    assert registry.locate(np.empty(10)) is None
    assert registry.locate(array[:0]) is None
    del array
    gc.collect()


@pytest.mark.parametrize("dtype", [np.float32, np.float16, al.bfloat16, np.longdouble,
                                   np.bool_, np.uint64])
@pytest.mark.parametrize("read_only", [False, True])
def test_locate_finds_every_dtype_writable_or_not(comm, dtype, read_only):
    array = al.shared_empty(64, np.uint8, comm)
    view = array[16:48].view(dtype)
    view.flags.writeable = not read_only
    registry = SharedBuffers.find(comm)
    assert registry.locate(view) == (0, 16)
    assert registry.locate(np.frombuffer(view.tobytes(), dtype)) is None   # a private copy
    del array, view
    gc.collect()


def test_place_names_both_buffers_and_follows_the_arrays_passed(comm):
    first, second = al.shared_empty(64, np.int32, comm), al.shared_empty(64, np.int32, comm)
    registry = SharedBuffers.find(comm)
    assert registry.place(first, second) == (0, 0, 1, 0, 256)
    assert registry.place(first[16:32], second[:16]) == (0, 64, 1, 0, 64)
    assert registry.place(first, first) == (0, 0, 0, 0, 256)      # in place
    private = np.empty(64, np.int32)
    assert registry.place(first, private) == NOT_SHARED
    assert registry.place(private, private) == NOT_SHARED
    assert registry.place(first, second) == (0, 0, 1, 0, 256)     # remembered pair replaced
    del first, second
    gc.collect()


@pytest.mark.parametrize("shape, dtype, problem", [
    (-1, np.float32, "shape"), ((2, -3), np.float32, "shape"), (2.5, np.float32, "shape"),
    ("7", np.float32, "shape"), (4, "no-such-type", "dtype"), (4, np.complex64, "dtype"),
    (4, object, "dtype")])
def test_bad_arguments_name_the_argument(comm, shape, dtype, problem):
    with pytest.raises(al.ArgumentError, match=f"^{problem}:"):
        al.shared_empty(shape, dtype, comm)
    assert SharedBuffers.find(comm) is None


def test_needs_a_live_mpi_communicator(comm):
    with pytest.raises(al.ArgumentError, match="^comm:"):
        al.shared_empty(4, np.float32, "world")
    with al.HostTransferCommunicator(stream=HostStream()) as ht:
        with pytest.raises(al.UnsupportedError, match="^comm:.*ht backend"):
            al.shared_empty(4, np.float32, ht)
    other = al.MPICommunicator()
    other.free()
    with pytest.raises(al.CommunicatorError, match="freed"):
        al.shared_empty(4, np.float32, other)


def test_free_keeps_memory_still_referenced_and_says_so():
    comm = al.MPICommunicator()
    kept = al.shared_empty(1100, np.float64, comm)[100:]     # only a view survives
    dropped = al.shared_empty(1000, np.float64, comm)
    kept[:] = 5
    del dropped
    gc.collect()
    with pytest.warns(RuntimeWarning, match="1 al.shared_empty buffer"):
        comm.free()
    kept += 1                       # still mapped: no crash, the values survive
    assert np.all(kept == 6)


def test_free_without_live_buffers_is_silent():
    comm = al.MPICommunicator()
    al.shared_empty(10, np.int32, comm)
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        comm.free()
