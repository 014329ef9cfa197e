"""What the rank_ops_* tests share: dtypes, ops, a numpy reduction reference, and running an
operation blocking or nonblocking from one parametrised flag."""
import importlib.util

import numpy as np
import pytest
from hypothesis import strategies as st

import aluminum as al
from conftest import rank_data

NUMERIC_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                  np.uint64, np.float16, np.float32, np.float64, np.longdouble, al.bfloat16]
ALL_DTYPES = NUMERIC_DTYPES + [np.bool_]
FLOAT_OPS = [al.SUM, al.PROD, al.MIN, al.MAX, al.AVG]
INT_OPS = FLOAT_OPS + [al.LOR, al.LAND, al.LXOR, al.BOR, al.BAND, al.BXOR]
BOOL_OPS = [al.LOR, al.LAND, al.LXOR, al.BOR, al.BAND, al.BXOR, al.MIN, al.MAX]

# Element counts (or per-rank block sizes): 0, 1, odd, and sizes not divisible by the ranks.
SMALL_COUNTS = st.one_of(st.sampled_from([0, 1, 2, 3, 5, 7]), st.integers(0, 600))
# One count per possible rank (tests use the first comm.size): the same on every rank.
RANK_COUNTS = st.lists(st.one_of(st.just(0), st.integers(0, 40)), min_size=4, max_size=4)
SEEDS = st.integers(0, 2**16)
DTYPES = st.sampled_from(ALL_DTYPES)

ENGINE = importlib.util.find_spec("aluminum.engine.progress") is not None
BLOCKING = pytest.mark.parametrize("blocking", [
    True,
    pytest.param(False, marks=pytest.mark.skipif(
        not ENGINE, reason="nonblocking needs the progress engine (aluminum.engine.progress)")),
], ids=["blocking", "nonblocking"])


def ops_for(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return BOOL_OPS
    return INT_OPS if dtype.kind in "iu" else FLOAT_OPS


REDUCTION_CASES = st.sampled_from(ALL_DTYPES).flatmap(
    lambda dt: st.tuples(st.just(dt), st.sampled_from(ops_for(dt))))
ALL_REDUCTION_CASES = [(dt, op) for dt in ALL_DTYPES for op in ops_for(dt)]


def reduced(count, dtype, op, size, seed):
    """Every rank's ``rank_data`` reduced in rank order with numpy (values keep it exact)."""
    result = rank_data(count, dtype, 0, seed).copy()
    for rank in range(1, size):
        op.reduce_into(result, rank_data(count, dtype, rank, seed))
    op.finish(result, size)
    return result


def call(blocking, name, *args, **kwargs):
    """``al.<name>(...)``, or ``al.nonblocking_<name>(...)`` and wait for its request."""
    if blocking:
        assert getattr(al, name)(*args, **kwargs) is None
    else:
        getattr(al, "nonblocking_" + name)(*args, **kwargs).wait()


def packed_displs(counts, gaps, reverse):
    """Displacements placing the blocks with ``gaps`` between them, in rank order or reversed."""
    order = range(len(counts) - 1, -1, -1) if reverse else range(len(counts))
    displs, offset = [0] * len(counts), 0
    for rank in order:
        offset += gaps[rank]
        displs[rank] = offset
        offset += counts[rank]
    return displs


def filler(count, dtype):
    """A recognisable value for elements an operation must leave alone."""
    return np.full(count, 7, dtype)


GAPS = st.lists(st.integers(0, 3), min_size=4, max_size=4)
ROOTS = st.integers(0, 3)


def layout(counts, gaps, reverse, size):
    """(counts, displs, extent) for ``size`` ranks; displs None when blocks are packed."""
    counts, gaps = counts[:size], gaps[:size]
    if not any(gaps) and not reverse:
        return counts, None, sum(counts)
    displs = packed_displs(counts, gaps, reverse)
    return counts, displs, max((d + c for c, d in zip(counts, displs)), default=0)


def place(counts, displs, extent, blocks, dtype):
    """The buffer a v-variant should produce: each block at its displacement, filler elsewhere."""
    out = filler(extent, dtype)
    offset = 0
    for rank, (count, block) in enumerate(zip(counts, blocks)):
        start = offset if displs is None else displs[rank]
        out[start:start + count] = block
        offset += count
    return out


def ring(comm):
    """(next rank, previous rank) around the ring."""
    return (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
