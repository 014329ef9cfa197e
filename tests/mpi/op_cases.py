"""What the rank_ops_* tests share: dtypes, ops, array providers, a numpy reduction
reference, and the layouts of the v-variants.

Every property test runs on each backend (backends.BACKENDS, the ``backend_comm`` fixture)
in each mode (backends.EVERY_MODE) for the same derandomized examples; each example also
draws the array provider (tests/providers.py) the buffers are passed as, among those that
can carry its dtype, and ``@every_provider`` adds one explicit example per provider, so
every provider meets every operation on every backend in every mode at least once.
"""
import inspect

import numpy as np
from hypothesis import assume, example
from hypothesis import strategies as st

import aluminum as al
from conftest import rank_data
from providers import PROVIDERS, carries

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
PROVIDER_NAMES = st.sampled_from(list(PROVIDERS))


def wrapper_for(name, dtype):
    """The function wrapping numpy arrays of ``dtype`` as provider ``name``; an example whose
    provider cannot carry ``dtype`` (torch and longdouble, dlpack and bfloat16...) is
    rejected, so hypothesis draws another."""
    assume(carries(name, dtype))
    return PROVIDERS[name]


def read_only(array, name):
    """``array`` made read-only and wrapped as provider ``name``, for buffers an operation
    only reads; left writable where the provider cannot say read-only (torch tensors)."""
    if carries(name, array.dtype, writable=False):
        array.flags.writeable = False
    return PROVIDERS[name](array)


def every_provider(**fixed):
    """One explicit example per provider (and in place or not, where the test takes
    ``inplace``) with the other arguments ``fixed``: int32 data, which every provider
    carries, unless ``fixed`` says otherwise."""
    def decorate(test):   # applied above @given: read the parameters of the inner test
        params = inspect.signature(test.hypothesis.inner_test).parameters
        args = {name: value for name, value in {"dtype": np.int32, "seed": 5}.items()
                if name in params}
        args.update(fixed)
        places = [True, False] if "inplace" in params else [None]
        for name in reversed(list(PROVIDERS)):
            for inplace in places:
                extra = {} if inplace is None else {"inplace": inplace}
                test = example(provider=name, **args, **extra)(test)
        return test
    return decorate


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
