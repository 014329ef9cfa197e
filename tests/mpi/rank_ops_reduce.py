"""allreduce, reduce, reduce_scatter and reduce_scatterv on every rank against a numpy
reference (op_cases.numpy_reduce, written from numpy alone).

Cross product (see op_cases.py): the property tests run on each backend (MPI, host-transfer)
in each mode on the same derandomized examples, each example with a drawn array provider
(a diagonal over providers) plus one explicit example per provider; the exhaustive test runs
every (dtype, op) on each backend in each mode at one small size, the providers taking turns
(each (dtype, op) goes to the next provider that carries the dtype, so every provider meets
every op and most dtypes without the full product).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from backends import EVERY_MODE, call, is_stream_ordered, settle
from conftest import rank_data
from op_cases import (ALL_REDUCTION_CASES, PROVIDER_NAMES, RANK_COUNTS, REDUCTION_CASES, ROOTS,
                      SEEDS, SMALL_COUNTS, every_provider, filler, read_only, reduced,
                      wrapper_for)
from providers import PROVIDERS, FakeCudaArray, carries

COUNTS = st.one_of(st.sampled_from([0, 1, 2, 3, 5, 7, 1023]), st.integers(0, 3000))
EXAMPLES = settings(max_examples=15)
SUM_INT32 = (np.int32, al.SUM)
ALLREDUCE_COUNTS = st.one_of(st.sampled_from([0, 1, 2, 3, 5, 7, 1023]), st.integers(0, 5000))


def assert_identical_on_all_ranks(comm, result):
    gathered = comm.mpi_comm.allgather(result.tobytes())
    assert all(g == gathered[0] for g in gathered), "ranks disagree on the result"


@EVERY_MODE
@EXAMPLES
@every_provider(count=7, case=SUM_INT32)
@given(count=ALLREDUCE_COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_allreduce(backend_comm, mode, count, case, inplace, seed, provider):
    (dtype, op), comm = case, backend_comm
    wrap = wrapper_for(provider, dtype)
    mine = rank_data(count, dtype, comm.rank, seed)
    original = mine.copy()
    if inplace:
        call(comm, mode, "allreduce", wrap(mine), comm, op=op)
        result = mine
    else:
        result = filler(count, dtype)
        call(comm, mode, "allreduce", read_only(mine, provider), comm, op=op,
             recvbuf=wrap(result))
        np.testing.assert_array_equal(mine, original)
    np.testing.assert_array_equal(result, reduced(count, dtype, op, comm.size, seed))
    assert_identical_on_all_ranks(comm, result)


@EVERY_MODE
@EXAMPLES
@every_provider(count=7, case=SUM_INT32, root=1)
@given(count=COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), root=ROOTS, seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_reduce(backend_comm, mode, count, case, inplace, root, seed, provider):
    (dtype, op), comm = case, backend_comm
    wrap = wrapper_for(provider, dtype)
    root %= comm.size
    mine = rank_data(count, dtype, comm.rank, seed)
    original = mine.copy()
    if inplace:
        call(comm, mode, "reduce", wrap(mine), comm, root=root, op=op)
        result = mine
    else:
        result = filler(count, dtype)
        call(comm, mode, "reduce", wrap(mine), comm, root=root, op=op, recvbuf=wrap(result))
        np.testing.assert_array_equal(mine, original)
    if comm.rank == root:
        np.testing.assert_array_equal(result, reduced(count, dtype, op, comm.size, seed))
    else:
        np.testing.assert_array_equal(mine, original)
        np.testing.assert_array_equal(result, original if inplace else filler(count, dtype))


@EVERY_MODE
@EXAMPLES
@every_provider(block=3, case=SUM_INT32)
@given(block=SMALL_COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_reduce_scatter(backend_comm, mode, block, case, inplace, seed, provider):
    (dtype, op), comm = case, backend_comm
    wrap = wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
    mine = rank_data(size * block, dtype, rank, seed)
    original = mine.copy()
    expected = reduced(size * block, dtype, op, size, seed)[rank * block:(rank + 1) * block]
    if inplace:
        call(comm, mode, "reduce_scatter", wrap(mine), comm, op=op)
        np.testing.assert_array_equal(mine[:block], expected)
        if is_stream_ordered(comm):
            # The rest is unspecified (MPI's in-place rule); host-transfer staging copies
            # back the result block only.
            np.testing.assert_array_equal(mine[block:], original[block:])
    else:
        result = filler(block, dtype)
        call(comm, mode, "reduce_scatter", wrap(mine), comm, op=op, recvbuf=wrap(result))
        np.testing.assert_array_equal(mine, original)
        np.testing.assert_array_equal(result, expected)


@EVERY_MODE
@EXAMPLES
@every_provider(counts=[3, 0, 2, 5], case=SUM_INT32)
@given(counts=RANK_COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_reduce_scatterv(backend_comm, mode, counts, case, inplace, seed, provider):
    (dtype, op), comm = case, backend_comm
    wrap = wrapper_for(provider, dtype)
    counts = counts[:comm.size]
    total, start = sum(counts), sum(counts[:comm.rank])
    mine = rank_data(total, dtype, comm.rank, seed)
    original = mine.copy()
    expected = reduced(total, dtype, op, comm.size, seed)[start:start + counts[comm.rank]]
    if inplace:
        call(comm, mode, "reduce_scatterv", wrap(mine), counts, comm, op=op)
        result = mine[:counts[comm.rank]]
    else:
        result = filler(counts[comm.rank], dtype)
        call(comm, mode, "reduce_scatterv", wrap(mine), counts, comm, op=op,
             recvbuf=wrap(result))
        np.testing.assert_array_equal(mine, original)
    np.testing.assert_array_equal(result, expected)


@EVERY_MODE
def test_every_dtype_and_op_on_every_reducing_op(backend_comm, mode):
    """Exhaustive over (dtype, op), the providers taking turns: allreduce, reduce at the last
    rank, reduce_scatter and reduce_scatterv, at 3 elements per rank."""
    comm = backend_comm
    rank, size = comm.rank, comm.size
    counts = [r + 1 for r in range(size)]
    root = size - 1
    turn = 0
    for seed, (dtype, op) in enumerate(ALL_REDUCTION_CASES):
        full = reduced(3 * size, dtype, op, size, seed)
        partial = reduced(sum(counts), dtype, op, size, seed)
        start = sum(counts[:rank])
        able = [n for n in PROVIDERS if carries(n, dtype)]
        name, turn = able[turn % len(able)], turn + 1
        wrap, what = PROVIDERS[name], f"{np.dtype(dtype)} {op} as {name}"
        mine = rank_data(3 * size, dtype, rank, seed)
        call(comm, mode, "allreduce", wrap(mine), comm, op=op)
        np.testing.assert_array_equal(mine, full, err_msg=f"allreduce {what}")

        mine = rank_data(3 * size, dtype, rank, seed)
        result = filler(3 * size, dtype)
        call(comm, mode, "reduce", wrap(mine), comm, root=root, op=op, recvbuf=wrap(result))
        if rank == root:
            np.testing.assert_array_equal(result, full, err_msg=f"reduce {what}")

        result = filler(3, dtype)
        call(comm, mode, "reduce_scatter", wrap(mine), comm, op=op, recvbuf=wrap(result))
        np.testing.assert_array_equal(result, full[3 * rank:3 * rank + 3],
                                      err_msg=f"reduce_scatter {what}")

        mine = rank_data(sum(counts), dtype, rank, seed)
        call(comm, mode, "reduce_scatterv", wrap(mine), counts, comm, op=op)
        np.testing.assert_array_equal(mine[:counts[rank]], partial[start:start + counts[rank]],
                                      err_msg=f"reduce_scatterv {what}")


@pytest.mark.parametrize("count", [1 << 18, (1 << 18) + 3])
def test_reduce_large(backend_comm, count):
    comm = backend_comm
    mine = np.full(count, comm.rank + 1, np.float32)
    al.reduce(mine, comm, root=comm.size - 1)
    settle(comm)
    if comm.rank == comm.size - 1:
        assert np.all(mine == comm.size * (comm.size + 1) / 2)
    else:
        assert np.all(mine == comm.rank + 1)


@pytest.mark.parametrize("op", ["allreduce", "bcast"])
def test_device_buffer_is_refused_without_a_device_path(backend_comm, op):
    """``providers.FakeCudaArray`` (host memory claiming to be a GPU buffer) is for neither
    backend here: MPI takes host memory only, and the host-transfer backend needs a CUDA
    stream for a device buffer.  Each refusal leaves the communicator usable."""
    comm = backend_comm
    device = FakeCudaArray(np.zeros(4, np.float32))
    match = "stream" if is_stream_ordered(comm) else "host memory"
    with pytest.raises(al.BufferError, match=match):
        getattr(al, op)(device, comm)
    buf = np.ones(4, np.float32)
    call(comm, "blocking", "allreduce", buf, comm)
    np.testing.assert_array_equal(buf, comm.size)
