"""Zero-copy allreduce on ``al.shared_empty`` buffers, on every rank (run on 1-4 ranks).

Buffers are views into shared segments allocated once per module (at varying offsets, so
announced offsets are exercised); every result is checked against a numpy reference and,
for inexact floats, for bit-identity across ranks.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from aluminum.backends.mpi.algorithms.shared_buffers import SharedBuffers
from conftest import rank_data, tuning_table
from rank_algorithms import assert_identical_on_all_ranks, inexact_data
from rank_allreduce import CASES, SIZES, reference

POOL_BYTES = 5000 * 16 + 4096


@pytest.fixture(scope="module")
def pools(comm):
    """Two shared segments per rank (send and receive side), allocated once."""
    return al.shared_empty(POOL_BYTES, np.uint8, comm), al.shared_empty(POOL_BYTES, np.uint8,
                                                                         comm)


def shared_copy(pool, data, offset):
    """``data`` copied into ``pool`` at ``offset`` bytes (a multiple of the item size)."""
    view = pool[offset:offset + data.nbytes].view(data.dtype)
    view[...] = data
    return view


@settings(max_examples=60)
@given(count=SIZES, case=CASES, inplace=st.booleans(), nonblocking=st.booleans(),
       slot=st.integers(0, 255), seed=st.integers(0, 2**16))
def test_allreduce_on_shared_buffers_matches_numpy(comm, pools, count, case, inplace,
                                                    nonblocking, slot, seed):
    dtype, op = case
    data = rank_data(count, dtype, comm.rank, seed)
    offset = slot * np.dtype(dtype).itemsize
    send = shared_copy(pools[0], data, offset)
    recv = None if inplace else shared_copy(pools[1], np.full_like(data, 7), offset)
    if nonblocking:
        al.nonblocking_allreduce(send, comm, op=op, recvbuf=recv, algo="shared_memory").wait()
    else:
        al.allreduce(send, comm, op=op, recvbuf=recv, algo="shared_memory")
    result = send if inplace else recv
    if not inplace:
        np.testing.assert_array_equal(send, data)
    np.testing.assert_array_equal(result, reference(count, dtype, op, comm.size, seed),
                                  err_msg=f"{np.dtype(dtype)} {op.name} count={count}")


@settings(max_examples=20)
@given(count=st.integers(0, 4000), dtype=st.sampled_from([np.float16, np.float32, al.bfloat16]),
       op=st.sampled_from([al.SUM, al.PROD, al.AVG]), seed=st.integers(0, 2**16))
def test_inexact_results_are_bit_identical_on_every_rank(comm, pools, count, dtype, op, seed):
    send = shared_copy(pools[0], inexact_data(count, dtype, op, comm.rank, seed), 64)
    al.allreduce(send, comm, op=op, algo="shared_memory")
    assert_identical_on_all_ranks(comm, send)


def test_ranks_with_private_buffers_send_everyone_through_staging(comm, pools):
    """Rank 0's buffer is private: every rank must take the staged path and agree."""
    for count in (10, 100_000, 300_001):
        data = np.arange(count, dtype=np.float64) + comm.rank
        shared = al.shared_empty(count, np.float64, comm)       # collective: every rank
        shared[:] = data
        buf = data if comm.rank == 0 else shared
        al.allreduce(buf, comm, algo="shared_memory")
        expected = sum(np.arange(count, dtype=np.float64) + r for r in range(comm.size))
        np.testing.assert_array_equal(buf, expected)


def test_shared_and_private_operations_in_flight_together_stay_in_order(comm, pools):
    count = 1000
    shared = [shared_copy(pools[k], np.full(count, comm.rank + 1.0), 0) for k in range(2)]
    private = [np.full(count, comm.rank + 1.0) for _ in range(2)]
    requests = [al.nonblocking_allreduce(buf, comm, algo="shared_memory")
                for pair in zip(shared, private) for buf in pair]
    al.wait_all(requests)
    for buf in shared + private:
        np.testing.assert_array_equal(buf, comm.size * (comm.size + 1) / 2)


def test_mismatched_sizes_raise_everywhere_and_leave_buffers_and_comm_usable(comm, pools):
    if comm.size == 1:
        pytest.skip("a size mismatch needs two ranks")
    count = 100 + comm.rank
    send = shared_copy(pools[0], np.arange(count, dtype=np.float32), 0)
    before = send.copy()
    with pytest.raises(al.OperationError, match="differ in size"):
        al.allreduce(send, comm, algo="shared_memory")
    np.testing.assert_array_equal(send, before)
    again = shared_copy(pools[0], np.ones(64, np.float32), 0)
    al.allreduce(again, comm, algo="shared_memory")
    np.testing.assert_array_equal(again, comm.size)


@pytest.mark.parametrize("wrap", ["torch", "memoryview"])
def test_other_objects_over_shared_buffers_take_the_zero_copy_path(comm, pools, wrap):
    """A torch tensor made with ``torch.from_numpy`` of a shared buffer, or an array over a
    memoryview of one, reaches the same memory: it is found by address, and the call runs
    zero-copy (it builds a zero-copy plan) on more than one rank."""
    registry = SharedBuffers.find(comm)
    registry.plans.clear()
    data = np.arange(300, dtype=np.float32) * (comm.rank + 1)
    view = shared_copy(pools[0], data, 128)
    if wrap == "torch":
        buf = pytest.importorskip("torch").from_numpy(view)
    else:
        buf = np.frombuffer(memoryview(view), np.float32)
    al.allreduce(buf, comm, algo="shared_memory")
    np.testing.assert_array_equal(view, np.arange(300, dtype=np.float32)
                                  * (comm.size * (comm.size + 1) // 2))
    assert bool(registry.plans) == (comm.size > 1)


@pytest.fixture
def table_by_buffers(comm):
    """The selector's table for this test: ring on communicators without shared buffers,
    recursive doubling on those with them, at every size."""
    rules = [{"backend": "mpi", "op": "allreduce", "comm_size": comm.size, "buffers": kind,
              "by_bytes": [[0, algo]]}
             for kind, algo in (("private", "ring"), ("shared", "recursive_doubling"))]
    with tuning_table("buffers_table", comm.rank, rules):
        yield


def test_automatic_chooses_again_once_the_communicator_has_shared_buffers(comm,
                                                                           table_by_buffers):
    """Rank 0 passes the same array on every call (its plan is remembered), the others new
    ones, after ``shared_empty`` of a kind not seen before (views: chosen anew): every rank
    must then run the shared buffers' rule, or rank 0's remembered ring would meet the
    others' recursive doubling."""
    fresh = comm.copy()
    try:
        count = 1000
        kept = np.empty(count)
        expected = np.full(count, comm.size * (comm.size + 1) / 2)

        def allreduce_a_few_times(new_array):
            for _ in range(3):
                buf = kept if comm.rank == 0 else new_array()
                buf[...] = comm.rank + 1.0
                al.allreduce(buf, fresh)
                np.testing.assert_array_equal(buf, expected)

        assert al.allreduce_init(kept, fresh).algorithm == "allreduce/ring"
        allreduce_a_few_times(lambda: np.empty(count))
        al.shared_empty(16, np.float64, fresh)
        assert al.allreduce_init(kept, fresh).algorithm == "allreduce/recursive_doubling"
        allreduce_a_few_times(lambda: np.empty(count + 1)[1:])
    finally:
        fresh.free()
