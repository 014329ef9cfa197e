"""Integer overflow wraps around, as in C, numpy, NCCL and torch: on every backend, with
every allreduce algorithm, in every mode (README, "Reduction ops").

Open MPI's AVX op component saturates 8- and 16-bit sums of 16 elements or more (255 for
16 uint8 values of 200 on 2 ranks, where every other algorithm gave 144); the values here
are drawn to overflow, at counts on both sides of 16."""
import numpy as np
from hypothesis import given, strategies as st

import aluminum as al
from backends import MODES, call

INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64]
WRAPPING_OPS = [al.SUM, al.PROD, al.AVG]
COUNTS = st.one_of(st.sampled_from([1, 15, 16, 17, 64, 1000]), st.integers(1, 3000))


def overflowing_data(count, dtype, rank, seed):
    """Values in the top half of ``dtype``'s range (either sign for signed types): any
    two of them overflow when added or multiplied."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed * 7919 + rank)
    magnitude = rng.integers(info.max // 2, info.max, count, endpoint=True)
    if info.min < 0:
        magnitude = np.where(rng.integers(0, 2, count) == 1, -magnitude, magnitude)
    return magnitude.astype(dtype)


def wrapped_reference(values, op):
    """The reduction in exact Python integers, wrapped into the dtype's range afterwards
    (two's complement); AVG divides the wrapped sum, truncating toward zero."""
    dtype = values[0].dtype
    info = np.iinfo(dtype)
    span = 1 << (8 * dtype.itemsize)

    def wrap(value):
        return (value - info.min) % span + info.min

    exact = np.stack(values).astype(object)
    if op is al.PROD:
        result = [wrap(v) for v in exact.prod(axis=0)]
    else:
        result = [wrap(v) for v in exact.sum(axis=0)]
        if op is al.AVG:
            size = len(values)
            result = [abs(v) // size * (1 if v >= 0 else -1) for v in result]
    return np.array(result, dtype=object).astype(dtype)


def algorithms_of(comm):
    return al.algorithms("allreduce", comm=comm)


@given(data=st.data(), dtype=st.sampled_from(INT_DTYPES), op=st.sampled_from(WRAPPING_OPS),
       count=COUNTS, mode=st.sampled_from(MODES), seed=st.integers(0, 1 << 16),
       in_place=st.booleans())
def test_integer_overflow_wraps_on_every_algorithm(backend_comm, data, dtype, op, count,
                                                   mode, seed, in_place):
    comm = backend_comm
    algo = data.draw(st.sampled_from(algorithms_of(comm)))
    dtype = np.dtype(dtype)
    mine = overflowing_data(count, dtype, comm.rank, seed)
    expected = wrapped_reference(
        [overflowing_data(count, dtype, r, seed) for r in range(comm.size)], op)
    buf = mine.copy()
    recvbuf = None if in_place else np.zeros_like(mine)
    call(comm, mode, "allreduce", buf, comm, op=op, recvbuf=recvbuf, algo=algo)
    result = buf if in_place else recvbuf
    np.testing.assert_array_equal(result, expected,
                                  err_msg=f"{algo} {mode} {dtype} {op.name} x{count}")


def test_sixteen_uint8_of_200_wrap_to_the_same_answer_everywhere(backend_comm):
    """The issue's case: every algorithm and the automatic choice give (200 * size) % 256."""
    comm = backend_comm
    for algo in ["automatic", *algorithms_of(comm)]:
        for mode in MODES:
            buf = np.full(16, 200, np.uint8)
            recvbuf = np.zeros_like(buf)
            call(comm, mode, "allreduce", buf, comm, recvbuf=recvbuf, algo=algo)
            np.testing.assert_array_equal(recvbuf, np.full(16, (200 * comm.size) % 256),
                                          err_msg=f"{algo} {mode}")
