"""Allreduce on MPI communicators: large counts, a rejected call, a user's subgroup; and the
allreduce cases and numpy reference rank_algorithms.py and rank_shared_buffers.py share.

Allreduce against numpy over every dtype and op, backend, mode and array provider is
rank_ops_reduce.py's test_allreduce."""
import numpy as np
import pytest
from hypothesis import strategies as st
from mpi4py import MPI

import aluminum as al
from conftest import rank_data
from op_cases import numpy_reduce

REAL_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
               np.uint64, np.float16, np.float32, np.float64, al.bfloat16]
FLOAT_OPS = [al.SUM, al.PROD, al.MIN, al.MAX, al.AVG]
INT_OPS = FLOAT_OPS + [al.LOR, al.LAND, al.LXOR, al.BOR, al.BAND, al.BXOR]
BOOL_OPS = [al.LOR, al.LAND, al.LXOR, al.BOR, al.BAND, al.BXOR, al.MIN, al.MAX]
SIZES = st.one_of(st.sampled_from([0, 1, 2, 3, 5, 7, 1023]), st.integers(0, 5000))


def reference(count, dtype, op, size, seed):
    """Every rank's data reduced with numpy alone (op_cases.numpy_reduce)."""
    return numpy_reduce([rank_data(count, dtype, r, seed) for r in range(size)], op)


def ops_for(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return BOOL_OPS
    return INT_OPS if dtype.kind in "iu" else FLOAT_OPS


CASES = st.sampled_from(REAL_DTYPES + [np.bool_]).flatmap(
    lambda dt: st.tuples(st.just(dt), st.sampled_from(ops_for(dt))))


@pytest.mark.parametrize("count", [1 << 20, (1 << 20) + 3])
def test_allreduce_large(comm, count):
    mine = np.full(count, comm.rank + 1, np.float32)
    al.allreduce(mine, comm)
    assert np.all(mine == comm.size * (comm.size + 1) / 2)


def test_communicator_usable_after_rejected_call(comm):
    buf = np.arange(6, dtype=np.float32) + comm.rank
    before = buf.copy()
    with pytest.raises(al.UnsupportedError):
        al.allreduce(buf, comm, op=al.BXOR)
    np.testing.assert_array_equal(buf, before)
    al.allreduce(buf, comm)
    expected = sum(np.arange(6, dtype=np.float32) + r for r in range(comm.size))
    np.testing.assert_array_equal(buf, expected)


def test_user_mpi_comm_subgroup(comm):
    color = comm.rank % 2
    sub = MPI.COMM_WORLD.Split(color, comm.rank)
    with al.MPICommunicator(sub) as subcomm:
        buf = np.array([comm.rank], np.int64)
        al.allreduce(buf, subcomm)
        members = [r for r in range(comm.size) if r % 2 == color]
        assert buf[0] == sum(members)
        assert subcomm.size == len(members)
    sub.Free()
