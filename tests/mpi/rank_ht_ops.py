"""All 18 operations on the host-transfer backend (host streams) against numpy references.

The same properties the MPI backend's rank_ops_* tests check, run on an
``al.HostTransferCommunicator`` bound to a host stream that stages host buffers as device
buffers (``AL_HT_STAGE_HOST=1``), so every copy of the GPU path runs: partial copies of
in-place and v-variant buffers included.  (Unstaged host buffers are MPI's own operations on
the user's memory; rank_ht_streams.py runs all 18 that way too.)  A blocking call is only
stream-ordered, so ``run`` synchronizes the stream before the result is checked; a
nonblocking call's ``wait()`` alone must make the result visible.
"""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from aluminum.backends.runtime import host_runtime
from conftest import rank_data
from op_cases import (ALL_REDUCTION_CASES, DTYPES, GAPS, RANK_COUNTS, REDUCTION_CASES, ROOTS,
                      SEEDS, SMALL_COUNTS, filler, layout, place, reduced, ring)

EXAMPLES = settings(max_examples=12)
BLOCKING = pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "nonblocking"])


def staging_communicator(stream):
    """An HT communicator on ``stream`` that stages host buffers (``AL_HT_STAGE_HOST=1``)."""
    previous = os.environ.get("AL_HT_STAGE_HOST")
    os.environ["AL_HT_STAGE_HOST"] = "1"
    try:
        return al.HostTransferCommunicator(stream=stream)
    finally:
        if previous is None:
            del os.environ["AL_HT_STAGE_HOST"]
        else:
            os.environ["AL_HT_STAGE_HOST"] = previous


@pytest.fixture(scope="module")
def ht():
    with staging_communicator(host_runtime().new_stream()) as comm:
        yield comm
        comm.stream.synchronize()


def run(ht, blocking, name, *args, **kwargs):
    """``al.<name>`` then wait for the stream, or ``al.nonblocking_<name>(...).wait()``."""
    if blocking:
        assert getattr(al, name)(*args, **kwargs) is None
        kwargs.get("stream", ht.stream).synchronize()
    else:
        request = getattr(al, "nonblocking_" + name)(*args, **kwargs)
        request.wait()
        assert request.test()


def start_of(counts, displs, rank):
    return sum(counts[:rank]) if displs is None else displs[rank]


# -- reductions --------------------------------------------------------------------------


@BLOCKING
@EXAMPLES
@given(count=st.one_of(st.sampled_from([0, 1, 7, 1023]), st.integers(0, 3000)),
       case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS)
def test_allreduce(ht, blocking, count, case, inplace, seed):
    dtype, op = case
    mine = rank_data(count, dtype, ht.rank, seed)
    original = mine.copy()
    if inplace:
        run(ht, blocking, "allreduce", mine, ht, op=op)
        result = mine
    else:
        result = filler(count, dtype)
        run(ht, blocking, "allreduce", mine, ht, op=op, recvbuf=result)
        np.testing.assert_array_equal(mine, original)
    np.testing.assert_array_equal(result, reduced(count, dtype, op, ht.size, seed))


@BLOCKING
@EXAMPLES
@given(count=SMALL_COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), root=ROOTS,
       seed=SEEDS)
def test_reduce(ht, blocking, count, case, inplace, root, seed):
    dtype, op = case
    root %= ht.size
    mine = rank_data(count, dtype, ht.rank, seed)
    original = mine.copy()
    result = mine if inplace else filler(count, dtype)
    run(ht, blocking, "reduce", mine, ht, root=root, op=op,
        recvbuf=None if inplace else result)
    if ht.rank == root:
        np.testing.assert_array_equal(result, reduced(count, dtype, op, ht.size, seed))
    else:
        np.testing.assert_array_equal(mine, original)
        np.testing.assert_array_equal(result, original if inplace else filler(count, dtype))


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS)
def test_reduce_scatter(ht, blocking, block, case, inplace, seed):
    dtype, op = case
    rank, size = ht.rank, ht.size
    mine = rank_data(size * block, dtype, rank, seed)
    original = mine.copy()
    expected = reduced(size * block, dtype, op, size, seed)[rank * block:(rank + 1) * block]
    if inplace:
        run(ht, blocking, "reduce_scatter", mine, ht, op=op)
        np.testing.assert_array_equal(mine[:block], expected)
        np.testing.assert_array_equal(mine[block:], original[block:])   # never copied back
    else:
        result = filler(block, dtype)
        run(ht, blocking, "reduce_scatter", mine, ht, op=op, recvbuf=result)
        np.testing.assert_array_equal(mine, original)
        np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(counts=RANK_COUNTS, case=REDUCTION_CASES, inplace=st.booleans(), seed=SEEDS)
def test_reduce_scatterv(ht, blocking, counts, case, inplace, seed):
    dtype, op = case
    counts = counts[:ht.size]
    total, start, mine_count = sum(counts), sum(counts[:ht.rank]), counts[ht.rank]
    mine = rank_data(total, dtype, ht.rank, seed)
    expected = reduced(total, dtype, op, ht.size, seed)[start:start + mine_count]
    if inplace:
        run(ht, blocking, "reduce_scatterv", mine, counts, ht, op=op)
        result = mine[:mine_count]
    else:
        result = filler(mine_count, dtype)
        run(ht, blocking, "reduce_scatterv", mine, counts, ht, op=op, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
def test_every_dtype_and_op(ht, blocking):
    """Exhaustive over (dtype, op), AVG and the logical ops included: allreduce and reduce."""
    size, root = ht.size, ht.size - 1
    for seed, (dtype, op) in enumerate(ALL_REDUCTION_CASES):
        full = reduced(2 * size + 1, dtype, op, size, seed)
        mine = rank_data(2 * size + 1, dtype, ht.rank, seed)
        run(ht, blocking, "allreduce", mine, ht, op=op)
        np.testing.assert_array_equal(mine, full, err_msg=f"allreduce {dtype} {op}")
        mine = rank_data(2 * size + 1, dtype, ht.rank, seed)
        result = filler(2 * size + 1, dtype)
        run(ht, blocking, "reduce", mine, ht, root=root, op=op, recvbuf=result)
        if ht.rank == root:
            np.testing.assert_array_equal(result, full, err_msg=f"reduce {dtype} {op}")


def test_large_allreduce_spans_staging_size_classes(ht):
    for count in [(1 << 20) + 3, 1 << 18]:
        mine = np.full(count, ht.rank + 1, np.float32)
        al.allreduce(mine, ht)
        ht.stream.synchronize()
        assert np.all(mine == ht.size * (ht.size + 1) / 2)


# -- data movement -----------------------------------------------------------------------


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), seed=SEEDS)
def test_allgather(ht, blocking, block, dtype, inplace, seed):
    rank, size = ht.rank, ht.size
    mine = rank_data(block, dtype, rank, seed)
    expected = np.concatenate([rank_data(block, dtype, r, seed) for r in range(size)])
    result = filler(size * block, dtype)
    if inplace:
        result[rank * block:(rank + 1) * block] = mine
        run(ht, blocking, "allgather", result, ht)
    else:
        run(ht, blocking, "allgather", mine, ht, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), seed=SEEDS)
def test_allgatherv(ht, blocking, counts, gaps, reverse, dtype, inplace, seed):
    rank, size = ht.rank, ht.size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    blocks = [rank_data(counts[r], dtype, r, seed) for r in range(size)]
    result = filler(extent, dtype)   # gaps between blocks must keep the filler
    if inplace:
        start = start_of(counts, displs, rank)
        result[start:start + counts[rank]] = blocks[rank]
        run(ht, blocking, "allgatherv", result, counts, displs, ht)
    else:
        run(ht, blocking, "allgatherv", blocks[rank], counts, displs, ht, recvbuf=result)
    np.testing.assert_array_equal(result, place(counts, displs, extent, blocks, dtype))


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), root=ROOTS, seed=SEEDS)
def test_gather(ht, blocking, block, dtype, inplace, root, seed):
    rank, size = ht.rank, ht.size
    root %= size
    mine = rank_data(block, dtype, rank, seed)
    if rank != root:
        run(ht, blocking, "gather", mine, ht, root=root)
        np.testing.assert_array_equal(mine, rank_data(block, dtype, rank, seed))
        return
    result = filler(size * block, dtype)
    if inplace:
        result[rank * block:(rank + 1) * block] = mine
        run(ht, blocking, "gather", result, ht, root=root)
    else:
        run(ht, blocking, "gather", mine, ht, root=root, recvbuf=result)
    expected = np.concatenate([rank_data(block, dtype, r, seed) for r in range(size)])
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), root=ROOTS, seed=SEEDS)
def test_gatherv(ht, blocking, counts, gaps, reverse, dtype, inplace, root, seed):
    rank, size = ht.rank, ht.size
    root %= size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    blocks = [rank_data(counts[r], dtype, r, seed) for r in range(size)]
    if rank != root:
        run(ht, blocking, "gatherv", blocks[rank], counts, displs, ht, root=root)
        return
    result = filler(extent, dtype)
    if inplace:
        start = start_of(counts, displs, rank)
        result[start:start + counts[rank]] = blocks[rank]
        run(ht, blocking, "gatherv", result, counts, displs, ht, root=root)
    else:
        run(ht, blocking, "gatherv", blocks[rank], counts, displs, ht, root=root,
            recvbuf=result)
    np.testing.assert_array_equal(result, place(counts, displs, extent, blocks, dtype))


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), root=ROOTS, seed=SEEDS)
def test_scatter(ht, blocking, block, dtype, inplace, root, seed):
    rank, size = ht.rank, ht.size
    root %= size
    source = rank_data(size * block, dtype, root, seed)
    expected = source[rank * block:(rank + 1) * block].copy()
    if rank == root:
        source.flags.writeable = False   # the root's buffer is only read
        if inplace:
            run(ht, blocking, "scatter", source, ht, root=root)
            result = source[rank * block:(rank + 1) * block]
        else:
            result = filler(block, dtype)
            run(ht, blocking, "scatter", source, ht, root=root, recvbuf=result)
    else:
        result = filler(block, dtype)
        if inplace:
            run(ht, blocking, "scatter", result, ht, root=root)
        else:
            run(ht, blocking, "scatter", None, ht, root=root, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), root=ROOTS, seed=SEEDS)
def test_scatterv(ht, blocking, counts, gaps, reverse, dtype, inplace, root, seed):
    rank, size = ht.rank, ht.size
    root %= size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    source = rank_data(extent, dtype, root, seed)
    start = start_of(counts, displs, rank)
    expected = source[start:start + counts[rank]].copy()
    result = filler(counts[rank], dtype)
    if rank == root and inplace:
        run(ht, blocking, "scatterv", source, counts, displs, ht, root=root)
        result = source[start:start + counts[rank]]
    elif rank == root:
        run(ht, blocking, "scatterv", source, counts, displs, ht, root=root, recvbuf=result)
    elif inplace:
        run(ht, blocking, "scatterv", result, counts, displs, ht, root=root)
    else:
        run(ht, blocking, "scatterv", None, counts, displs, ht, root=root, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(count=SMALL_COUNTS, dtype=DTYPES, root=ROOTS, seed=SEEDS)
def test_bcast(ht, blocking, count, dtype, root, seed):
    root %= ht.size
    expected = rank_data(count, dtype, root, seed)
    buf = expected.copy() if ht.rank == root else filler(count, dtype)
    run(ht, blocking, "bcast", buf, ht, root=root)
    np.testing.assert_array_equal(buf, expected)


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), seed=SEEDS)
def test_alltoall(ht, blocking, block, dtype, inplace, seed):
    rank, size = ht.rank, ht.size
    mine = rank_data(size * block, dtype, rank, seed)
    expected = np.concatenate(
        [rank_data(size * block, dtype, r, seed)[rank * block:(rank + 1) * block]
         for r in range(size)])
    if inplace:
        run(ht, blocking, "alltoall", mine, ht)
        result = mine
    else:
        result = filler(size * block, dtype)
        run(ht, blocking, "alltoall", mine, ht, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(matrix=st.lists(st.integers(0, 12), min_size=16, max_size=16), gaps=GAPS,
       reverse=st.booleans(), dtype=DTYPES, inplace=st.booleans(), seed=SEEDS)
def test_alltoallv(ht, blocking, matrix, gaps, reverse, dtype, inplace, seed):
    """``sent[i][j]`` elements go from rank i to rank j (symmetric when in place)."""
    rank, size = ht.rank, ht.size
    sent = [[matrix[4 * min(i, j) + max(i, j)] if inplace else matrix[4 * i + j]
             for j in range(size)] for i in range(size)]

    def outgoing(i, j):
        counts, displs, extent = layout(sent[i], gaps, reverse, size)
        start = start_of(counts, displs, j)
        return rank_data(extent, dtype, i, seed)[start:start + counts[j]]

    send_counts, send_displs, send_extent = layout(sent[rank], gaps, reverse, size)
    recv_counts, recv_displs, recv_extent = layout([sent[j][rank] for j in range(size)],
                                                   gaps, reverse, size)
    expected = place(recv_counts, recv_displs, recv_extent,
                     [outgoing(j, rank) for j in range(size)], dtype)
    mine = rank_data(send_extent, dtype, rank, seed)
    if inplace:
        # Elements outside the receive blocks keep this rank's own data (never copied back).
        outside = place(recv_counts, recv_displs, recv_extent,
                        [np.zeros(c, bool) for c in recv_counts], np.bool_)
        np.copyto(expected, mine, where=outside)
        run(ht, blocking, "alltoallv", mine, send_counts, send_displs, recv_counts,
            recv_displs, ht)
        result = mine
    else:
        result = filler(recv_extent, dtype)
        run(ht, blocking, "alltoallv", mine, send_counts, send_displs, recv_counts,
            recv_displs, ht, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


# -- point-to-point and barrier ------------------------------------------------------------


@BLOCKING
@EXAMPLES
@given(count=SMALL_COUNTS, dtype=DTYPES, seed=SEEDS)
def test_send_recv_ring(ht, blocking, count, dtype, seed):
    """Blocking HT send and recv only enqueue, so every rank may send first."""
    nxt, prev = ring(ht)
    mine = rank_data(count, dtype, ht.rank, seed)
    result = filler(count, dtype)
    if blocking:
        al.send(mine, nxt, ht)
        al.recv(result, prev, ht)
        ht.stream.synchronize()
    else:
        al.wait_all([al.nonblocking_send(mine, nxt, ht), al.nonblocking_recv(result, prev, ht)])
    np.testing.assert_array_equal(result, rank_data(count, dtype, prev, seed))
    np.testing.assert_array_equal(mine, rank_data(count, dtype, ht.rank, seed))


@BLOCKING
@EXAMPLES
@given(count=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), seed=SEEDS)
def test_sendrecv_ring(ht, blocking, count, dtype, inplace, seed):
    nxt, prev = ring(ht)
    mine = rank_data(count, dtype, ht.rank, seed)
    result = mine if inplace else filler(count, dtype)
    run(ht, blocking, "sendrecv", mine, nxt, result, prev, ht)
    np.testing.assert_array_equal(result, rank_data(count, dtype, prev, seed))
    if not inplace:
        np.testing.assert_array_equal(mine, rank_data(count, dtype, ht.rank, seed))


@BLOCKING
@EXAMPLES
@given(base=st.integers(0, 10), dtype=DTYPES, per_peer=st.integers(1, 3), seed=SEEDS)
def test_multisendrecv_all_pairs(ht, blocking, base, dtype, per_peer, seed):
    """Every rank sends ``per_peer`` messages of different lengths to every rank (itself
    included); they must match in list order."""
    rank, size = ht.rank, ht.size

    def count(src, dst, k):
        return (base + 3 * src + 5 * dst + 7 * k) % 11

    def message(src, dst, k):
        return rank_data(count(src, dst, k) + 8 * k, dtype, src + 10 * dst, seed)[8 * k:]

    sends = [(message(rank, j, k), j) for j in range(size) for k in range(per_peer)]
    order = [(j, k) for j in reversed(range(size)) for k in range(per_peer)]
    recvs = [(filler(count(j, rank, k), dtype), j) for j, k in order]
    run(ht, blocking, "multisendrecv", sends, recvs, ht)
    for (buf, j), (_, k) in zip(recvs, order):
        np.testing.assert_array_equal(buf, message(j, rank, k), err_msg=f"from {j} #{k}")


@BLOCKING
def test_barrier_orders_every_stream_after_the_last_rank(ht, blocking):
    """Work enqueued after the barrier runs only once every rank's stream reached it."""
    import time

    last = ht.size - 1
    if ht.rank == last:
        ht.stream.enqueue_sleep(0.2)
    entered = []
    ht.stream.enqueue(lambda: entered.append(time.time()))
    left = []
    if blocking:
        al.barrier(ht)
    else:
        request = al.nonblocking_barrier(ht)
        request.wait_on_stream()
    ht.stream.enqueue(lambda: left.append(time.time()))
    ht.stream.synchronize()
    entries = ht.mpi_comm.allgather(entered[0])
    assert left[0] >= entries[last]
