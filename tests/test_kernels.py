"""The numpy kernels the custom algorithms call: vector copies and reduction finishing."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from aluminum.core.reduction import check_op_for_dtype
from aluminum.backends.mpi.algorithms.vector_copy import copy_vector, vector_copier

# Byte counts on both sides of the switches between memcpy and numpy's loop (2 KiB, 8 MiB)
# and of every word width the loop copies in.
EDGES = [0, 1, 2, 3, 4, 6, 7, 8, 2047, 2048, 2049, 2050, 2052, 4096, (8 << 20) - 8, 8 << 20]


@settings(max_examples=60, deadline=None)
@given(nbytes=st.one_of(st.sampled_from(EDGES), st.integers(0, 20000)),
       seed=st.integers(0, 2**16))
def test_vector_copier_copies_exactly_what_copy_vector_copies(nbytes, seed):
    source = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    by_function, by_copier = np.zeros_like(source), np.zeros_like(source)
    copy_vector(by_function, source)
    copier = vector_copier(by_copier, source)
    copier()
    np.testing.assert_array_equal(by_function, source)
    np.testing.assert_array_equal(by_copier, source)
    source[:] = 255 - source          # a copier is bound to its arrays: it copies anew
    copier()
    np.testing.assert_array_equal(by_copier, source)


def _applies(op, dtype) -> bool:
    try:
        check_op_for_dtype(op, np.dtype(dtype))
    except al.UnsupportedError:
        return False
    return True


@pytest.mark.parametrize("op, dtype", [(op, dtype) for op in al.ReductionOp
                                       for dtype in (np.int32, np.uint8, np.float32, np.bool_)
                                       if _applies(op, dtype)])
@pytest.mark.parametrize("comm_size", [1, 2, 3, 4])
def test_finish_changes_nothing_where_finishes_says_so(op, comm_size, dtype):
    result = np.array([0, 1, 2, 5, 7, 9, 200], dtype=dtype)
    finished = result.copy()
    op.finish(finished, comm_size)
    if not op.finishes(comm_size):
        np.testing.assert_array_equal(finished, result)
    elif dtype is not np.bool_:       # (bools are 0/1 already)
        assert not np.array_equal(finished, result)


@given(values=st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=20),
       comm_size=st.integers(1, 7), dtype=st.sampled_from([np.int64, np.int8, np.uint64]))
def test_integer_avg_divides_exactly_toward_zero(values, comm_size, dtype):
    info = np.iinfo(dtype)
    sums = np.array([min(max(v, info.min), info.max) for v in values], dtype=dtype)
    expected = [int(abs(int(v)) // comm_size) * (1 if v >= 0 else -1) for v in sums]
    al.AVG.finish(sums, comm_size)
    assert [int(v) for v in sums] == expected
