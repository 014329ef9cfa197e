"""Data-movement collectives against a numpy reference: allgather(v), gather(v), scatter(v),
bcast, alltoall(v).  Every rank's data is ``rank_data(..., rank, seed)``, so each rank can
build every other rank's contribution locally."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from conftest import rank_data
from op_cases import (BLOCKING, DTYPES, GAPS, RANK_COUNTS, ROOTS, SEEDS, SMALL_COUNTS, call,
                      filler, layout, place)

EXAMPLES = settings(max_examples=30)


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), seed=SEEDS)
def test_allgather(comm, blocking, block, dtype, inplace, seed):
    rank, size = comm.rank, comm.size
    mine = rank_data(block, dtype, rank, seed)
    expected = np.concatenate([rank_data(block, dtype, r, seed) for r in range(size)])
    if inplace:
        result = filler(size * block, dtype)
        result[rank * block:(rank + 1) * block] = mine
        call(blocking, "allgather", result, comm)
    else:
        result = filler(size * block, dtype)
        call(blocking, "allgather", mine, comm, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), seed=SEEDS)
def test_allgatherv(comm, blocking, counts, gaps, reverse, dtype, inplace, seed):
    rank, size = comm.rank, comm.size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    blocks = [rank_data(counts[r], dtype, r, seed) for r in range(size)]
    expected = place(counts, displs, extent, blocks, dtype)
    if inplace:
        result = filler(extent, dtype)
        start = sum(counts[:rank]) if displs is None else displs[rank]
        result[start:start + counts[rank]] = blocks[rank]
        call(blocking, "allgatherv", result, counts, displs, comm)
    else:
        result = filler(extent, dtype)
        call(blocking, "allgatherv", blocks[rank], counts, displs, comm, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), root=ROOTS, seed=SEEDS)
def test_gather(comm, blocking, block, dtype, inplace, root, seed):
    rank, size = comm.rank, comm.size
    root %= size
    mine = rank_data(block, dtype, rank, seed)
    expected = np.concatenate([rank_data(block, dtype, r, seed) for r in range(size)])
    if rank != root:
        call(blocking, "gather", mine, comm, root=root)
        return
    result = filler(size * block, dtype)
    if inplace:
        result[rank * block:(rank + 1) * block] = mine
        call(blocking, "gather", result, comm, root=root)
    else:
        call(blocking, "gather", mine, comm, root=root, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), root=ROOTS, seed=SEEDS)
def test_gatherv(comm, blocking, counts, gaps, reverse, dtype, inplace, root, seed):
    rank, size = comm.rank, comm.size
    root %= size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    blocks = [rank_data(counts[r], dtype, r, seed) for r in range(size)]
    if rank != root:
        call(blocking, "gatherv", blocks[rank], counts, displs, comm, root=root)
        return
    result = filler(extent, dtype)
    if inplace:
        start = sum(counts[:rank]) if displs is None else displs[rank]
        result[start:start + counts[rank]] = blocks[rank]
        call(blocking, "gatherv", result, counts, displs, comm, root=root)
    else:
        call(blocking, "gatherv", blocks[rank], counts, displs, comm, root=root,
             recvbuf=result)
    np.testing.assert_array_equal(result, place(counts, displs, extent, blocks, dtype))


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), root=ROOTS, seed=SEEDS)
def test_scatter(comm, blocking, block, dtype, inplace, root, seed):
    rank, size = comm.rank, comm.size
    root %= size
    source = rank_data(size * block, dtype, root, seed)
    expected = source[rank * block:(rank + 1) * block]
    if rank == root:
        original = source.copy()
        if inplace:
            call(blocking, "scatter", source, comm, root=root)
            result = source[rank * block:(rank + 1) * block]
        else:
            result = filler(block, dtype)
            call(blocking, "scatter", source, comm, root=root, recvbuf=result)
        np.testing.assert_array_equal(source, original)
    elif inplace:
        result = filler(block, dtype)
        call(blocking, "scatter", result, comm, root=root)
    else:
        result = filler(block, dtype)
        call(blocking, "scatter", None, comm, root=root, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), root=ROOTS, seed=SEEDS)
def test_scatterv(comm, blocking, counts, gaps, reverse, dtype, inplace, root, seed):
    rank, size = comm.rank, comm.size
    root %= size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    source = rank_data(extent, dtype, root, seed)
    start = sum(counts[:rank]) if displs is None else displs[rank]
    expected = source[start:start + counts[rank]].copy()
    result = filler(counts[rank], dtype)
    if rank == root and inplace:
        call(blocking, "scatterv", source, counts, displs, comm, root=root)
        result = source[start:start + counts[rank]]
    elif rank == root:
        call(blocking, "scatterv", source, counts, displs, comm, root=root, recvbuf=result)
    elif inplace:
        call(blocking, "scatterv", result, counts, displs, comm, root=root)
    else:
        call(blocking, "scatterv", None, counts, displs, comm, root=root, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


@BLOCKING
@EXAMPLES
@given(count=SMALL_COUNTS, dtype=DTYPES, root=ROOTS, seed=SEEDS)
def test_bcast(comm, blocking, count, dtype, root, seed):
    root %= comm.size
    expected = rank_data(count, dtype, root, seed)
    buf = expected.copy() if comm.rank == root else filler(count, dtype)
    if comm.rank == root:
        buf.flags.writeable = False
    call(blocking, "bcast", buf, comm, root=root)
    np.testing.assert_array_equal(buf, expected)


@BLOCKING
@EXAMPLES
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), seed=SEEDS)
def test_alltoall(comm, blocking, block, dtype, inplace, seed):
    rank, size = comm.rank, comm.size
    mine = rank_data(size * block, dtype, rank, seed)
    expected = np.concatenate(
        [rank_data(size * block, dtype, r, seed)[rank * block:(rank + 1) * block]
         for r in range(size)])
    if inplace:
        call(blocking, "alltoall", mine, comm)
        result = mine
    else:
        result = filler(size * block, dtype)
        call(blocking, "alltoall", mine, comm, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


MATRIX = st.lists(st.integers(0, 12), min_size=16, max_size=16)


@BLOCKING
@EXAMPLES
@given(matrix=MATRIX, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES, inplace=st.booleans(),
       seed=SEEDS)
def test_alltoallv(comm, blocking, matrix, gaps, reverse, dtype, inplace, seed):
    """``sent[i][j]`` elements go from rank i to rank j (symmetric when in place)."""
    rank, size = comm.rank, comm.size
    sent = [[matrix[4 * min(i, j) + max(i, j)] if inplace else matrix[4 * i + j]
             for j in range(size)] for i in range(size)]

    def send_layout(i):
        return layout(sent[i], gaps, reverse, size)

    def outgoing(i, j):
        counts, displs, extent = send_layout(i)
        data = rank_data(extent, dtype, i, seed)
        start = sum(counts[:j]) if displs is None else displs[j]
        return data[start:start + counts[j]]

    send_counts, send_displs, send_extent = send_layout(rank)
    recv_counts = [sent[j][rank] for j in range(size)]
    recv_counts, recv_displs, recv_extent = layout(recv_counts, gaps, reverse, size)
    blocks = [outgoing(j, rank) for j in range(size)]
    expected = place(recv_counts, recv_displs, recv_extent, blocks, dtype)
    mine = rank_data(send_extent, dtype, rank, seed)
    if inplace:
        # A symmetric matrix makes the send layout equal the receive layout; elements outside
        # the blocks keep this rank's own data.
        np.copyto(expected, mine, where=place(recv_counts, recv_displs, recv_extent,
                                              [np.zeros(c, bool) for c in recv_counts],
                                              np.bool_))
        call(blocking, "alltoallv", mine, send_counts, send_displs, recv_counts, recv_displs,
             comm)
        result = mine
    else:
        result = filler(recv_extent, dtype)
        call(blocking, "alltoallv", mine, send_counts, send_displs, recv_counts, recv_displs,
             comm, recvbuf=result)
    np.testing.assert_array_equal(result, expected)


def test_allgather_large(comm):
    block = (1 << 17) + 1
    mine = np.full(block, comm.rank, np.int32)
    result = np.empty(comm.size * block, np.int32)
    al.allgather(mine, comm, recvbuf=result)
    np.testing.assert_array_equal(result, np.repeat(np.arange(comm.size, dtype=np.int32), block))
