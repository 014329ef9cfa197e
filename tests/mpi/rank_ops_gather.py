"""Data-movement collectives against a numpy reference: allgather(v), gather(v), scatter(v),
bcast, alltoall(v).  Every rank's data is ``rank_data(..., rank, seed)``, so each rank can
build every other rank's contribution locally.

Cross product (see op_cases.py): every test runs on each backend (MPI, host-transfer) in
each mode (blocking, nonblocking, persistent) on the same derandomized examples; each
example draws its array provider (a diagonal over providers), and one explicit example per
provider (in place and not) gives the full backend x mode x provider product at one size.
"""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
from backends import EVERY_MODE, call, settle
from conftest import rank_data
from op_cases import (DTYPES, GAPS, PROVIDER_NAMES, RANK_COUNTS, ROOTS, SEEDS, SMALL_COUNTS,
                      every_provider, filler, layout, place, read_only, wrapper_for)

EXAMPLES = settings(max_examples=12)
V_LAYOUT = dict(counts=[3, 0, 2, 5], gaps=[1, 0, 2, 0], reverse=True)


def start_of(counts, displs, rank):
    return sum(counts[:rank]) if displs is None else displs[rank]


@EVERY_MODE
@EXAMPLES
@every_provider(block=3)
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_allgather(backend_comm, mode, block, dtype, inplace, seed, provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
    mine = rank_data(block, dtype, rank, seed)
    expected = np.concatenate([rank_data(block, dtype, r, seed) for r in range(size)])
    result = filler(size * block, dtype)
    if inplace:
        result[rank * block:(rank + 1) * block] = mine
        call(comm, mode, "allgather", wrap(result), comm)
    else:
        call(comm, mode, "allgather", wrap(mine), comm, recvbuf=wrap(result))
    np.testing.assert_array_equal(result, expected)


@EVERY_MODE
@EXAMPLES
@every_provider(**V_LAYOUT)
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), seed=SEEDS, provider=PROVIDER_NAMES)
def test_allgatherv(backend_comm, mode, counts, gaps, reverse, dtype, inplace, seed,
                    provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    blocks = [rank_data(counts[r], dtype, r, seed) for r in range(size)]
    result = filler(extent, dtype)   # gaps between blocks must keep the filler
    if inplace:
        start = start_of(counts, displs, rank)
        result[start:start + counts[rank]] = blocks[rank]
        call(comm, mode, "allgatherv", wrap(result), counts, displs, comm)
    else:
        call(comm, mode, "allgatherv", wrap(blocks[rank]), counts, displs, comm,
             recvbuf=wrap(result))
    np.testing.assert_array_equal(result, place(counts, displs, extent, blocks, dtype))


@EVERY_MODE
@EXAMPLES
@every_provider(block=3, root=1)
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), root=ROOTS, seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_gather(backend_comm, mode, block, dtype, inplace, root, seed, provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
    root %= size
    mine = rank_data(block, dtype, rank, seed)
    if rank != root:
        call(comm, mode, "gather", wrap(mine), comm, root=root)
        np.testing.assert_array_equal(mine, rank_data(block, dtype, rank, seed))
        return
    result = filler(size * block, dtype)
    if inplace:
        result[rank * block:(rank + 1) * block] = mine
        call(comm, mode, "gather", wrap(result), comm, root=root)
    else:
        call(comm, mode, "gather", wrap(mine), comm, root=root, recvbuf=wrap(result))
    expected = np.concatenate([rank_data(block, dtype, r, seed) for r in range(size)])
    np.testing.assert_array_equal(result, expected)


@EVERY_MODE
@EXAMPLES
@every_provider(root=1, **V_LAYOUT)
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), root=ROOTS, seed=SEEDS, provider=PROVIDER_NAMES)
def test_gatherv(backend_comm, mode, counts, gaps, reverse, dtype, inplace, root, seed,
                 provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
    root %= size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    blocks = [rank_data(counts[r], dtype, r, seed) for r in range(size)]
    if rank != root:
        call(comm, mode, "gatherv", wrap(blocks[rank]), counts, displs, comm, root=root)
        return
    result = filler(extent, dtype)
    if inplace:
        start = start_of(counts, displs, rank)
        result[start:start + counts[rank]] = blocks[rank]
        call(comm, mode, "gatherv", wrap(result), counts, displs, comm, root=root)
    else:
        call(comm, mode, "gatherv", wrap(blocks[rank]), counts, displs, comm, root=root,
             recvbuf=wrap(result))
    np.testing.assert_array_equal(result, place(counts, displs, extent, blocks, dtype))


@EVERY_MODE
@EXAMPLES
@every_provider(block=3, root=1)
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), root=ROOTS, seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_scatter(backend_comm, mode, block, dtype, inplace, root, seed, provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
    root %= size
    source = rank_data(size * block, dtype, root, seed)
    expected = source[rank * block:(rank + 1) * block].copy()
    result = filler(block, dtype)
    if rank == root:
        original = source.copy()
        if inplace:
            call(comm, mode, "scatter", wrap(source), comm, root=root)
            result = source[rank * block:(rank + 1) * block]
        else:
            source_view = read_only(source, provider)
            call(comm, mode, "scatter", source_view, comm, root=root, recvbuf=wrap(result))
        np.testing.assert_array_equal(source, original)
    elif inplace:
        call(comm, mode, "scatter", wrap(result), comm, root=root)
    else:
        call(comm, mode, "scatter", None, comm, root=root, recvbuf=wrap(result))
    np.testing.assert_array_equal(result, expected)


@EVERY_MODE
@EXAMPLES
@every_provider(root=1, **V_LAYOUT)
@given(counts=RANK_COUNTS, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES,
       inplace=st.booleans(), root=ROOTS, seed=SEEDS, provider=PROVIDER_NAMES)
def test_scatterv(backend_comm, mode, counts, gaps, reverse, dtype, inplace, root, seed,
                  provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
    root %= size
    counts, displs, extent = layout(counts, gaps, reverse, size)
    source = rank_data(extent, dtype, root, seed)
    start = start_of(counts, displs, rank)
    expected = source[start:start + counts[rank]].copy()
    result = filler(counts[rank], dtype)
    if rank == root and inplace:
        call(comm, mode, "scatterv", wrap(source), counts, displs, comm, root=root)
        result = source[start:start + counts[rank]]
    elif rank == root:
        call(comm, mode, "scatterv", wrap(source), counts, displs, comm, root=root,
             recvbuf=wrap(result))
    elif inplace:
        call(comm, mode, "scatterv", wrap(result), counts, displs, comm, root=root)
    else:
        call(comm, mode, "scatterv", None, counts, displs, comm, root=root,
             recvbuf=wrap(result))
    np.testing.assert_array_equal(result, expected)


@EVERY_MODE
@EXAMPLES
@every_provider(count=4, root=1)
@given(count=SMALL_COUNTS, dtype=DTYPES, root=ROOTS, seed=SEEDS, provider=PROVIDER_NAMES)
def test_bcast(backend_comm, mode, count, dtype, root, seed, provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    root %= comm.size
    expected = rank_data(count, dtype, root, seed)
    if comm.rank == root:      # the root's buffer is only read
        buf = expected.copy()
        call(comm, mode, "bcast", read_only(buf, provider), comm, root=root)
    else:
        buf = filler(count, dtype)
        call(comm, mode, "bcast", wrap(buf), comm, root=root)
    np.testing.assert_array_equal(buf, expected)


@EVERY_MODE
@EXAMPLES
@every_provider(block=3)
@given(block=SMALL_COUNTS, dtype=DTYPES, inplace=st.booleans(), seed=SEEDS,
       provider=PROVIDER_NAMES)
def test_alltoall(backend_comm, mode, block, dtype, inplace, seed, provider):
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
    mine = rank_data(size * block, dtype, rank, seed)
    expected = np.concatenate(
        [rank_data(size * block, dtype, r, seed)[rank * block:(rank + 1) * block]
         for r in range(size)])
    if inplace:
        call(comm, mode, "alltoall", wrap(mine), comm)
        result = mine
    else:
        result = filler(size * block, dtype)
        call(comm, mode, "alltoall", wrap(mine), comm, recvbuf=wrap(result))
    np.testing.assert_array_equal(result, expected)


MATRIX = st.lists(st.integers(0, 12), min_size=16, max_size=16)


@EVERY_MODE
@EXAMPLES
@every_provider(matrix=[(3 * i + 1) % 7 for i in range(16)], gaps=[1, 0, 2, 0], reverse=True)
@given(matrix=MATRIX, gaps=GAPS, reverse=st.booleans(), dtype=DTYPES, inplace=st.booleans(),
       seed=SEEDS, provider=PROVIDER_NAMES)
def test_alltoallv(backend_comm, mode, matrix, gaps, reverse, dtype, inplace, seed, provider):
    """``sent[i][j]`` elements go from rank i to rank j (symmetric when in place)."""
    comm, wrap = backend_comm, wrapper_for(provider, dtype)
    rank, size = comm.rank, comm.size
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
        # A symmetric matrix makes the send layout equal the receive layout; elements outside
        # the receive blocks keep this rank's own data.
        outside = place(recv_counts, recv_displs, recv_extent,
                        [np.zeros(c, bool) for c in recv_counts], np.bool_)
        np.copyto(expected, mine, where=outside)
        call(comm, mode, "alltoallv", wrap(mine), send_counts, send_displs, recv_counts,
             recv_displs, comm)
        result = mine
    else:
        result = filler(recv_extent, dtype)
        call(comm, mode, "alltoallv", wrap(mine), send_counts, send_displs, recv_counts,
             recv_displs, comm, recvbuf=wrap(result))
    np.testing.assert_array_equal(result, expected)


def test_allgather_large(backend_comm):
    comm = backend_comm
    block = (1 << 17) + 1
    mine = np.full(block, comm.rank, np.int32)
    result = np.empty(comm.size * block, np.int32)
    al.allgather(mine, comm, recvbuf=result)
    settle(comm)
    np.testing.assert_array_equal(result, np.repeat(np.arange(comm.size, dtype=np.int32), block))

