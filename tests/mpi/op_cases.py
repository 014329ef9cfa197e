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
# How a test calls the operation: blocking, nonblocking, or as a persistent plan
# (``al.<op>_init``) started and run twice, so a plan's second run is checked too.
PERSISTENT = "persistent"
BLOCKING = pytest.mark.parametrize("blocking", [
    True,
    pytest.param(False, marks=pytest.mark.skipif(
        not ENGINE, reason="nonblocking needs the progress engine (aluminum.engine.progress)")),
    PERSISTENT,
], ids=["blocking", "nonblocking", "persistent"])


def ops_for(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return BOOL_OPS
    return INT_OPS if dtype.kind in "iu" else FLOAT_OPS


REDUCTION_CASES = st.sampled_from(ALL_DTYPES).flatmap(
    lambda dt: st.tuples(st.just(dt), st.sampled_from(ops_for(dt))))
ALL_REDUCTION_CASES = [(dt, op) for dt in ALL_DTYPES for op in ops_for(dt)]


def reduced(count, dtype, op, size, seed):
    """Every rank's ``rank_data`` reduced with numpy alone (never the library's kernels)."""
    return numpy_reduce([rank_data(count, dtype, rank, seed) for rank in range(size)], op)


def numpy_reduce(values, op):
    """The reduction of ``values`` (one array per rank, one dtype) as Aluminum defines it,
    written from numpy and Python integers: SUM/PROD/AVG exact (integer AVG truncates toward
    zero, as NCCL's), logical ops give 0/1 on any number of ranks."""
    dtype = values[0].dtype
    stack = np.stack(values)
    wide = np.longdouble if dtype == np.longdouble else np.float64
    exact = stack.astype(object) if dtype.kind in "iub" else stack.astype(wide)
    name, size = op.name, len(values)
    if name == "SUM":
        result = exact.sum(axis=0)
    elif name == "PROD":
        result = exact.prod(axis=0)
    elif name == "AVG":
        total = exact.sum(axis=0)
        if dtype.kind in "iu":
            result = np.array([abs(s) // size * (1 if s >= 0 else -1) for s in total],
                              dtype=object)
        else:
            result = total / size
    elif name in ("MIN", "MAX"):
        result = exact.min(axis=0) if name == "MIN" else exact.max(axis=0)
    elif name in ("LOR", "LAND", "LXOR"):
        nonzero = (stack != 0).sum(axis=0)
        result = {"LOR": nonzero > 0, "LAND": nonzero == size, "LXOR": nonzero % 2 == 1}[name]
    else:
        ufunc = {"BOR": np.bitwise_or, "BAND": np.bitwise_and, "BXOR": np.bitwise_xor}[name]
        result = ufunc.reduce(stack, axis=0)
    return np.asarray(result).astype(dtype).reshape(values[0].shape)


def call(blocking, name, *args, **kwargs):
    """``al.<name>(...)``, or ``al.nonblocking_<name>(...)`` and wait for its request, or
    ``al.<name>_init(...)`` run as a plan: started and waited for, then, where running it
    again must give the same result (the buffers it reads are not the ones it writes), run
    blocking a second time."""
    if blocking == PERSISTENT:
        with getattr(al, name + "_init")(*args, **kwargs) as plan:
            plan.start().wait()
            if _rerun_is_idempotent(name, args, kwargs):
                plan.run()
    elif blocking:
        assert getattr(al, name)(*args, **kwargs) is None
    else:
        getattr(al, "nonblocking_" + name)(*args, **kwargs).wait()


def _rerun_is_idempotent(name, args, kwargs):
    """Out-of-place unrooted collectives read only what they do not write (and every rank
    passes a recvbuf or none, so all ranks decide alike); rooted ones may get a recvbuf on
    the root only, point-to-point messages would need a matching second send, and in-place
    results feed the next run."""
    return name in _UNROOTED and kwargs.get("recvbuf") is not None


_UNROOTED = frozenset({"allreduce", "reduce_scatter", "reduce_scatterv", "allgather",
                       "allgatherv", "alltoall", "alltoallv"})


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
