"""reduce, reduce_scatter and reduce_scatterv on every rank against a numpy reference."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from conftest import rank_data
from op_cases import (ALL_REDUCTION_CASES, BLOCKING, RANK_COUNTS, REDUCTION_CASES, SEEDS,
                      SMALL_COUNTS, call, filler, reduced)

COUNTS = st.one_of(st.sampled_from([0, 1, 2, 3, 5, 7, 1023]), st.integers(0, 3000))


@BLOCKING
@settings(max_examples=40)
@given(count=COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), root=st.integers(0, 3),
       seed=SEEDS)
def test_reduce(comm, blocking, count, case, inplace, root, seed):
    dtype, op = case
    root %= comm.size
    mine = rank_data(count, dtype, comm.rank, seed)
    original = mine.copy()
    if inplace:
        call(blocking, "reduce", mine, comm, root=root, op=op)
        result = mine
    else:
        result = filler(count, dtype)
        call(blocking, "reduce", mine, comm, root=root, op=op, recvbuf=result)
        np.testing.assert_array_equal(mine, original)
    if comm.rank == root:
        np.testing.assert_array_equal(result, reduced(count, dtype, op, comm.size, seed))
    else:
        np.testing.assert_array_equal(mine, original)
        np.testing.assert_array_equal(result, original if inplace else filler(count, dtype))


@BLOCKING
@settings(max_examples=40)
@given(block=SMALL_COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS)
def test_reduce_scatter(comm, blocking, block, case, inplace, seed):
    dtype, op = case
    rank, size = comm.rank, comm.size
    mine = rank_data(size * block, dtype, rank, seed)
    original = mine.copy()
    expected = reduced(size * block, dtype, op, size, seed)[rank * block:(rank + 1) * block]
    if inplace:
        call(blocking, "reduce_scatter", mine, comm, op=op)
        result = mine[:block]
    else:
        result = filler(block, dtype)
        call(blocking, "reduce_scatter", mine, comm, op=op, recvbuf=result)
        np.testing.assert_array_equal(mine, original)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@settings(max_examples=40)
@given(counts=RANK_COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS)
def test_reduce_scatterv(comm, blocking, counts, case, inplace, seed):
    dtype, op = case
    counts = counts[:comm.size]
    total, start = sum(counts), sum(counts[:comm.rank])
    mine = rank_data(total, dtype, comm.rank, seed)
    original = mine.copy()
    expected = reduced(total, dtype, op, comm.size, seed)[start:start + counts[comm.rank]]
    if inplace:
        call(blocking, "reduce_scatterv", mine, counts, comm, op=op)
        result = mine[:counts[comm.rank]]
    else:
        result = filler(counts[comm.rank], dtype)
        call(blocking, "reduce_scatterv", mine, counts, comm, op=op, recvbuf=result)
        np.testing.assert_array_equal(mine, original)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
def test_every_dtype_and_op_on_every_reducing_op(comm, blocking):
    """Exhaustive over (dtype, op): reduce at the last rank, reduce_scatter(v), allreduce."""
    rank, size = comm.rank, comm.size
    counts = [r + 1 for r in range(size)]
    root = size - 1
    for seed, (dtype, op) in enumerate(ALL_REDUCTION_CASES):
        full = reduced(3 * size, dtype, op, size, seed)
        mine = rank_data(3 * size, dtype, rank, seed)
        call(blocking, "allreduce", mine, comm, op=op)
        np.testing.assert_array_equal(mine, full, err_msg=f"allreduce {dtype} {op}")

        mine = rank_data(3 * size, dtype, rank, seed)
        result = filler(3 * size, dtype)
        call(blocking, "reduce", mine, comm, root=root, op=op, recvbuf=result)
        if rank == root:
            np.testing.assert_array_equal(result, full, err_msg=f"reduce {dtype} {op}")

        result = filler(3, dtype)
        call(blocking, "reduce_scatter", mine, comm, op=op, recvbuf=result)
        np.testing.assert_array_equal(result, full[3 * rank:3 * rank + 3],
                                      err_msg=f"reduce_scatter {dtype} {op}")

        mine = rank_data(sum(counts), dtype, rank, seed)
        start = sum(counts[:rank])
        expected = reduced(sum(counts), dtype, op, size, seed)[start:start + counts[rank]]
        call(blocking, "reduce_scatterv", mine, counts, comm, op=op)
        np.testing.assert_array_equal(mine[:counts[rank]], expected,
                                      err_msg=f"reduce_scatterv {dtype} {op}")


@pytest.mark.parametrize("count", [1 << 18, (1 << 18) + 3])
def test_reduce_large(comm, count):
    mine = np.full(count, comm.rank + 1, np.float32)
    al.reduce(mine, comm, root=comm.size - 1)
    if comm.rank == comm.size - 1:
        assert np.all(mine == comm.size * (comm.size + 1) / 2)
    else:
        assert np.all(mine == comm.rank + 1)

