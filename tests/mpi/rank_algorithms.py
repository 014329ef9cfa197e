"""Every custom MPI algorithm against a numpy reference, on every rank (run on 1-4 ranks).

Allreduce algorithms go through ``al.allreduce(..., algo=name)``; the ring reduce-scatter and
allgather through ``al.reduce_scatter``/``al.allgather(..., algo="ring")``; the direct reduce
through ``al.reduce(..., algo="direct")`` in every form, each rank also in a form of its own
(the rank-order bits: against a numpy sum left to right in rank order).  Besides values,
allreduce results must be bit-identical on every rank, checked on data whose floating-point
sums are inexact (so a rank that reduced in another order would show).
"""
import threading

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import aluminum as al
from aluminum.backends.mpi.algorithms.shared_window import SharedWindow
from aluminum.core.buffers import as_buffer
from conftest import rank_data
from rank_allreduce import CASES, reference

ALGOS = ["recursive_doubling", "ring", "rabenseifner", "shared_memory", "hierarchical"]
FLOAT_DTYPES = [np.float16, np.float32, np.float64, al.bfloat16]
SIZES = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 7, 1023]), st.integers(0, 3000))


def assert_identical_on_all_ranks(comm, result):
    gathered = comm.mpi_comm.allgather(result.tobytes())
    bad = [r for r, g in enumerate(gathered) if g != gathered[0]]
    assert not bad, f"ranks {bad} disagree with rank 0 on the result"


def offered(comm, algos=ALGOS):
    """The ``algos`` that run on ``comm`` (all of them on one node; launched on emulated
    hosts, shared_memory needs one node and hierarchical equal nodes)."""
    return [algo for algo in algos if algo in al.algorithms("allreduce", comm=comm)]


def skip_unless_offered(comm, algo):
    if algo not in offered(comm):
        pytest.skip(f"{algo} does not run on nodes of {[len(n) for n in comm.nodes]} ranks")


def run_allreduce(comm, mine, op, algo, inplace):
    """Allreduce ``mine`` and return the result; out of place checks ``mine`` is untouched."""
    if inplace:
        al.allreduce(mine, comm, op=op, algo=algo)
        return mine
    original, result = mine.copy(), np.full_like(mine, 7)
    al.allreduce(mine, comm, op=op, recvbuf=result, algo=algo)
    np.testing.assert_array_equal(mine, original)
    return result


@settings(max_examples=80)
@given(algo=st.sampled_from(ALGOS), count=SIZES, case=CASES, inplace=st.booleans(),
       seed=st.integers(0, 2**16))
def test_allreduce_matches_numpy(comm, algo, count, case, inplace, seed):
    assume(algo in offered(comm))
    dtype, op = case
    result = run_allreduce(comm, rank_data(count, dtype, comm.rank, seed), op, algo, inplace)
    np.testing.assert_array_equal(result, reference(count, dtype, op, comm.size, seed),
                                  err_msg=f"{algo} {np.dtype(dtype)} {op.name} count={count}")
    assert_identical_on_all_ranks(comm, result)


def inexact_data(count, dtype, op, rank, seed):
    """Values of mixed sign, with signed zeros, whose sums and products round; magnitudes
    vary widely for sums, stay near 1 for products (so float16 products stay finite)."""
    rng = np.random.default_rng(seed * 7919 + rank)
    if op is al.PROD:
        values = rng.uniform(0.5, 1.5, count) * rng.choice([-1.0, 1.0], count)
    else:
        values = rng.standard_normal(count) * 10.0 ** rng.integers(-3, 4, count)
    values[rng.random(count) < 0.1] = 0.0
    values[rng.random(count) < 0.1] = -0.0
    return values.astype(dtype)


@given(algo=st.sampled_from(ALGOS), count=SIZES, dtype=st.sampled_from(FLOAT_DTYPES),
       op=st.sampled_from([al.SUM, al.PROD, al.MIN, al.MAX, al.AVG]), inplace=st.booleans(),
       seed=st.integers(0, 2**16))
def test_inexact_floats_bit_identical_and_close(comm, algo, count, dtype, op, inplace, seed):
    assume(algo in offered(comm))
    result = run_allreduce(comm, inexact_data(count, dtype, op, comm.rank, seed), op, algo,
                           inplace)
    assert_identical_on_all_ranks(comm, result)
    data = np.array([inexact_data(count, dtype, op, r, seed).astype(np.float64)
                     for r in range(comm.size)]).reshape(comm.size, count)
    exact = {al.SUM: data.sum(0), al.AVG: data.mean(0), al.PROD: data.prod(0),
             al.MIN: data.min(0), al.MAX: data.max(0)}[op]
    eps = 2.0 ** -7 if dtype == al.bfloat16 else float(np.finfo(dtype).eps)
    scale = np.abs(data).prod(0) if op is al.PROD else np.abs(data).sum(0)
    tolerance = 2 * comm.size * eps * scale + (2 * eps if op is al.PROD else 0)
    error = np.abs(result.astype(np.float64) - exact)
    assert np.all(error <= tolerance), f"{algo} off by {error.max()} (> tolerance)"


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("count, dtype", [((1 << 18) + 3, np.float32), (1 << 17, np.int64)])
def test_allreduce_about_a_mebibyte(comm, algo, count, dtype):
    skip_unless_offered(comm, algo)
    mine = (np.arange(count) % 1000 + comm.rank).astype(dtype)
    expected = sum((np.arange(count) % 1000 + r).astype(dtype) for r in range(comm.size))
    result = run_allreduce(comm, mine, al.SUM, algo, inplace=False)
    np.testing.assert_array_equal(result, expected)
    assert_identical_on_all_ranks(comm, result)


@pytest.mark.parametrize("mode", ["blocking", "nonblocking", "persistent"])
def test_hierarchical_allreduce_across_every_pipelined_chunk(comm, mode):
    """16 MiB and 20 B of float32 across nodes: cut in the most chunks the pipeline takes,
    several crossing at once, the last one short (small integers: the sum is exact)."""
    skip_unless_offered(comm, "hierarchical")
    if len(comm.nodes) == 1:
        pytest.skip("one node: the hierarchical allreduce is the node's ring, in one piece")
    count = (1 << 22) + 5
    mine = (np.arange(count) % 1000 + comm.rank).astype(np.float32)
    expected = sum((np.arange(count) % 1000 + r).astype(np.float32) for r in range(comm.size))
    result = np.full_like(mine, 7)
    run_in_mode(mode, "allreduce", mine, comm, recvbuf=result, algo="hierarchical")
    np.testing.assert_array_equal(result, expected)
    assert_identical_on_all_ranks(comm, result)


@pytest.fixture
def small_chunk_comm():
    """A fresh communicator whose shared window has 4 KiB chunks: many pipelined rounds,
    short last chunks and slot reuse, on small vectors."""
    with al.MPICommunicator() as fresh:
        skip_unless_offered(fresh, "shared_memory")
        # a window made before its first shared_memory use is the one that use finds
        window = fresh.scratch(SharedWindow.KEY,
                               lambda: SharedWindow(fresh.local_comm, chunk_bytes=4096))
        assert window.chunk_bytes == 4096
        yield fresh


SEQUENCE = [(5000, np.float32), (7, np.float64), (0, np.float32), (3333, np.int8),
            (1024, np.float32), (2049, al.bfloat16), (1, np.uint64), (4097, np.float16)]


@pytest.mark.parametrize("inplace", [True, False])
def test_shared_memory_back_to_back(small_chunk_comm, inplace):
    comm = small_chunk_comm
    for repeat in range(3):
        for i, (count, dtype) in enumerate(SEQUENCE):
            seed = 100 * repeat + i
            result = run_allreduce(comm, rank_data(count, dtype, comm.rank, seed), al.SUM,
                                   "shared_memory", inplace)
            np.testing.assert_array_equal(result, reference(count, dtype, al.SUM, comm.size,
                                                            seed))


def test_shared_memory_interleaved_with_other_algorithms(small_chunk_comm):
    comm = small_chunk_comm
    for i in range(12):
        algo = ["shared_memory", ALGOS[i % 3], "shared_memory"][i % 3]
        count, dtype = SEQUENCE[i % len(SEQUENCE)]
        result = run_allreduce(comm, rank_data(count, dtype, comm.rank, i), al.MAX, algo,
                               inplace=i % 2 == 0)
        np.testing.assert_array_equal(result, reference(count, dtype, al.MAX, comm.size, i))


@pytest.mark.parametrize("nonblocking", [False, True], ids=["blocking", "nonblocking"])
@pytest.mark.parametrize("algo", ALGOS)
def test_repeat_calls_on_the_same_arrays(comm, algo, nonblocking):
    """A training loop reduces the same arrays every step: repeat calls skip validation (and,
    for states built straight from arrays, the Buffers) yet must see each step's values,
    in 2-D shapes, in place and out of place."""
    skip_unless_offered(comm, algo)
    def run(*args, **kwargs):
        if nonblocking:
            al.nonblocking_allreduce(*args, **kwargs).wait()
        else:
            al.allreduce(*args, **kwargs)
    grads, out = np.empty((3, 5), np.float32), np.empty((5, 3), np.float32)
    for step in range(4):
        grads[...] = rank_data(15, np.float32, comm.rank, step).reshape(3, 5)
        original = grads.copy()
        run(grads, comm, op=al.AVG, recvbuf=out, algo=algo)
        np.testing.assert_array_equal(out.reshape(-1),
                                      reference(15, np.float32, al.AVG, comm.size, step))
        np.testing.assert_array_equal(grads, original)
        run(grads, comm, algo=algo)
        np.testing.assert_array_equal(grads.reshape(-1),
                                      reference(15, np.float32, al.SUM, comm.size, step))


def test_shared_memory_refuses_ranks_on_other_nodes(comm):
    if comm.size == 1:
        pytest.skip("one rank is always on one node")
    buf = np.arange(4, dtype=np.float32)
    with al.MPICommunicator() as spread:
        spread.local_size = 1                  # as if the other ranks lived elsewhere
        with pytest.raises(al.UnsupportedError, match="one node"):
            al.allreduce(buf, spread, algo="shared_memory")
    np.testing.assert_array_equal(buf, np.arange(4, dtype=np.float32))


def test_threads_on_different_communicators(comm):
    """Blocking calls from several threads at once, one communicator per thread."""
    algos = offered(comm)
    comms = [al.MPICommunicator() for _ in algos]
    errors = []

    def work(thread_comm, algo, index):
        try:
            for i in range(6):
                count, seed = 1000 * i + index, 10 * index + i
                result = run_allreduce(thread_comm, rank_data(count, np.int32, comm.rank, seed),
                                       al.SUM, algo, inplace=i % 2 == 0)
                np.testing.assert_array_equal(
                    result, reference(count, np.int32, al.SUM, comm.size, seed))
        except BaseException as exc:        # reported by the main thread
            errors.append((algo, exc))

    threads = [threading.Thread(target=work, args=(c, a, i))
               for i, (c, a) in enumerate(zip(comms, algos))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for c in comms:
        c.free()
    assert not errors, errors


def test_nonblocking_on_one_communicator(comm):
    """Operations of every algorithm in flight together on one communicator never mix."""
    pytest.importorskip("aluminum.engine.progress")
    algos = offered(comm)
    cases = [(algos[i % len(algos)], 777 * i + 5, i) for i in range(10)]
    buffers = [rank_data(count, np.int64, comm.rank, seed) for _, count, seed in cases]
    requests = [al.nonblocking_allreduce(buf, comm, algo=algo)
                for buf, (algo, _, _) in zip(buffers, cases)]
    al.wait_all(requests)
    for buf, (algo, count, seed) in zip(buffers, cases):
        np.testing.assert_array_equal(
            buf, reference(count, np.int64, al.SUM, comm.size, seed), err_msg=algo)


@given(count=st.integers(0, 300), case=CASES, inplace=st.booleans(), seed=st.integers(0, 999))
def test_ring_reduce_scatter(comm, count, case, inplace, seed):
    dtype, op = case
    size = comm.size
    mine = rank_data(count * size, dtype, comm.rank, seed)
    expected = reference(count * size, dtype, op, size, seed)[comm.rank * count:][:count]
    if inplace:
        al.reduce_scatter(mine, comm, op=op, algo="ring")
        result = mine[:count]
    else:
        result = np.full(count, 3, dtype)
        al.reduce_scatter(mine, comm, op=op, recvbuf=result, algo="ring")
    np.testing.assert_array_equal(result, expected)


@given(count=st.integers(0, 300), dtype=st.sampled_from([np.int8, np.float64, al.bfloat16]),
       inplace=st.booleans(), seed=st.integers(0, 999))
def test_ring_allgather(comm, count, dtype, inplace, seed):
    size = comm.size
    blocks = [rank_data(count, dtype, r, seed) for r in range(size)]
    if inplace:
        result = np.zeros(count * size, dtype)
        result[comm.rank * count:][:count] = blocks[comm.rank]
        al.allgather(result, comm, algo="ring")
    else:
        result = np.zeros(count * size, dtype)
        al.allgather(blocks[comm.rank], comm, recvbuf=result, algo="ring")
    np.testing.assert_array_equal(result, np.concatenate(blocks))


REDUCE_FORMS = ["blocking", "nonblocking", "plan_run", "plan_start", "mixed"]


def direct_reduce(comm, mine, form, root, op, recvbuf=None, plan=None):
    """``al.reduce(..., algo="direct")`` of ``mine`` in ``form`` ("mixed": rank ``r`` uses
    the ``r % 4``-th of the others: their messages must match).  The plan forms run
    ``plan`` (bound to ``mine`` and ``recvbuf``) where given, else a new one."""
    if form == "mixed":
        form = REDUCE_FORMS[comm.rank % 4]
    options = dict(root=root, op=op, algo="direct")
    if recvbuf is not None and comm.rank == root:
        options["recvbuf"] = recvbuf
    if form == "blocking":
        al.reduce(mine, comm, **options)
    elif form == "nonblocking":
        al.nonblocking_reduce(mine, comm, **options).wait(timeout=20)
    elif plan is not None:
        run_plan(plan, form)
    else:
        with al.reduce_init(mine, comm, **options) as new:
            run_plan(new, form)


def run_plan(plan, form):
    if form == "plan_run":
        plan.run()
    else:
        plan.start().wait(timeout=20)


@settings(max_examples=40)
@given(count=SIZES, case=CASES, inplace=st.booleans(), root=st.integers(0, 3),
       form=st.sampled_from(REDUCE_FORMS), seed=st.integers(0, 999))
def test_direct_reduce_matches_numpy(comm, count, case, inplace, root, form, seed):
    dtype, op = case
    root %= comm.size
    mine = rank_data(count, dtype, comm.rank, seed)
    original = mine.copy()
    result = mine if inplace else np.full(count, 3, dtype)
    direct_reduce(comm, mine, form, root, op, None if inplace else result)
    if comm.rank == root:
        np.testing.assert_array_equal(result, reference(count, dtype, op, comm.size, seed),
                                      err_msg=f"{np.dtype(dtype)} {op.name} {form}")
    if comm.rank != root or not inplace:
        np.testing.assert_array_equal(mine, original)


def rank_order(values, op, size):
    """``((x0 (op) x1) (op) x2) ...`` left to right in rank order, with numpy (AVG: the
    sum, then divided by ``size`` in the element type)."""
    ufunc = np.multiply if op is al.PROD else np.add
    total = values[0].copy()
    for value in values[1:]:
        total = ufunc(total, value)
    if op is al.AVG and size > 1:
        total = total / total.dtype.type(size)
    return total


@pytest.mark.parametrize("dtype, op", [(np.float32, al.SUM), (np.float16, al.SUM),
                                       (al.bfloat16, al.AVG), (np.float64, al.PROD)])
def test_direct_reduce_bits_are_the_rank_order_sum_in_every_form(comm, dtype, op):
    """Every root, in place and out of place, every form and the forms mixed across ranks,
    twice on new values (the plan forms: one plan, its bound buffers rewritten): the bits
    of the left-to-right rank-order reduction, computed here with numpy."""
    count = 2000
    wrong = []
    for root in range(comm.size):
        for inplace in (True, False):
            mine = np.empty(count, dtype)
            result = mine if inplace else np.zeros(count, dtype)
            options = {} if inplace or comm.rank != root else {"recvbuf": result}
            with al.reduce_init(mine, comm, root=root, op=op, algo="direct",
                                **options) as plan:
                for repeat in range(2):
                    values = [inexact_data(count, dtype, op, r, 5 + repeat)
                              for r in range(comm.size)]
                    expected = rank_order(values, op, comm.size)
                    for form in REDUCE_FORMS:
                        if not inplace:
                            result[...] = 0
                        mine[...] = values[comm.rank]
                        direct_reduce(comm, mine, form, root, op,
                                      None if inplace else result, plan)
                        if comm.rank == root and result.tobytes() != expected.tobytes():
                            wrong.append((root, inplace, form, repeat))
    assert not wrong, f"not the rank-order bits at (root, inplace, form, repeat): {wrong}"


def test_direct_reduces_in_flight_together_keep_their_messages(comm):
    """Direct reduces to one root in flight together on one communicator, in every
    nonblocking form, between allreduces of per-call tags: each gets its own operands
    (the direct reduce's messages share one tag, matched in the order they were posted)."""
    root, count = comm.size - 1, 300
    operands = [rank_data(count, np.int64, comm.rank, seed) for seed in range(4)]
    results = [np.zeros(count, np.int64) for _ in operands]
    extra = rank_data(count, np.int64, comm.rank, 9)
    into = {"recvbuf": results[1]} if comm.rank == root else {}
    with al.reduce_init(operands[1], comm, root=root, algo="direct", **into) as plan:
        for _ in range(2):
            into = [{"recvbuf": r} if comm.rank == root else {} for r in results]
            requests = [al.nonblocking_reduce(operands[0], comm, root=root, algo="direct",
                                              **into[0]),
                        plan.start(),
                        al.nonblocking_allreduce(extra, comm, algo="ring"),
                        al.nonblocking_reduce(operands[2], comm, root=root, algo="direct",
                                              **into[2])]
            al.reduce(operands[3], comm, root=root, algo="direct", **into[3])
            al.wait_all(requests)
            np.testing.assert_array_equal(extra, reference(count, np.int64, al.SUM,
                                                           comm.size, 9))
            if comm.rank == root:
                for seed, result in enumerate(results):
                    np.testing.assert_array_equal(
                        result, reference(count, np.int64, al.SUM, comm.size, seed),
                        err_msg=f"operands of seed {seed}")
            extra[...] = rank_data(count, np.int64, comm.rank, 9)


def test_states_drive_directly(comm):
    """The State classes also run without the public API (as the engine and bench use them)."""
    from aluminum.backends.mpi.algorithms import CUSTOM_ALGORITHMS

    data = np.full(10, comm.rank + 1, np.float64)
    buf = as_buffer(data)
    CUSTOM_ALGORITHMS["allreduce"]["ring"].run_blocking(comm, None, buf, buf, al.AVG)
    np.testing.assert_array_equal(data, np.full(10, (comm.size + 1) / 2))


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.float16, al.bfloat16, np.float32,
                                   np.float64, np.longdouble])
@pytest.mark.parametrize("count", [0, 1, 3, 1025, 4099, 300001])
def test_copy_vector_is_exact(dtype, count):
    """The copy the algorithms use, over every word size and misaligned views."""
    from aluminum.backends.mpi.algorithms.vector_copy import copy_vector

    source = rank_data(count + 1, dtype, 0)[1:]         # misaligned by one element
    target = np.zeros(count + 3, dtype)[3:]
    copy_vector(target, source)
    assert target.tobytes() == source.tobytes()


# -- hierarchical reduce, bcast and allgather (several nodes only) --------------------------

TWO_LEVEL_OPS = ("reduce", "bcast", "allgather")
MODES = ("blocking", "nonblocking", "persistent")
TWO_LEVEL_CASES = [(np.float32, al.SUM), (np.float64, al.AVG), (np.int32, al.PROD)]


def run_in_mode(mode, name, *args, **kwargs):
    """``al.<name>`` blocking, nonblocking (waited for) or as a persistent plan run twice."""
    if mode == "blocking":
        getattr(al, name)(*args, **kwargs)
    elif mode == "nonblocking":
        getattr(al, f"nonblocking_{name}")(*args, **kwargs).wait()
    else:
        plan = getattr(al, f"{name}_init")(*args, **kwargs)
        plan.run()
        plan.start().wait()             # a second run: the same buffers, the same result
        plan.free()


def hierarchical_reduce_case(comm, mode, dtype, op, count, root, seed):
    mine = rank_data(count, dtype, comm.rank, seed)
    original = mine.copy()
    result = np.full(count, 9, dtype) if comm.rank == root else None
    run_in_mode(mode, "reduce", mine, comm, root=root, op=op, recvbuf=result,
                algo="hierarchical")
    np.testing.assert_array_equal(mine, original)          # only read, on every rank
    if comm.rank == root:
        np.testing.assert_array_equal(result, reference(count, dtype, op, comm.size, seed),
                                      err_msg=f"reduce {mode} {np.dtype(dtype)} root {root}")


def hierarchical_bcast_case(comm, mode, dtype, count, root, seed):
    expected = rank_data(count, dtype, root, seed)
    buf = expected.copy() if comm.rank == root else np.full(count, 9, dtype)
    run_in_mode(mode, "bcast", buf, comm, root=root, algo="hierarchical")
    np.testing.assert_array_equal(buf, expected, err_msg=f"bcast {mode} root {root}")


def hierarchical_allgather_case(comm, mode, dtype, count, inplace, seed):
    blocks = [rank_data(count, dtype, r, seed) for r in range(comm.size)]
    result = np.full(count * comm.size, 9, dtype)
    if inplace:
        result[comm.rank * count:][:count] = blocks[comm.rank]
        run_in_mode(mode, "allgather", result, comm, algo="hierarchical")
    else:
        run_in_mode(mode, "allgather", blocks[comm.rank], comm, recvbuf=result,
                    algo="hierarchical")
    np.testing.assert_array_equal(result, np.concatenate(blocks),
                                  err_msg=f"allgather {mode} inplace={inplace}")


@pytest.mark.parametrize("mode", MODES)
def test_hierarchical_reduce_bcast_allgather_match_numpy(comm, mode):
    """Uneven counts (not a multiple of the ranks or nodes), every root but one on rank 0's
    node, float32/float64/int32; a count over a mebibyte crosses in pipelined pieces."""
    if "hierarchical" not in al.algorithms("reduce", comm=comm):
        pytest.skip(f"hierarchical reduce needs several equal nodes, not {comm.nodes}")
    roots = sorted({0, comm.size - 1, comm.size // 2})
    for i, (dtype, op) in enumerate(TWO_LEVEL_CASES):
        for count in (0, 1, 4 * comm.size + 3, 1001):
            seed = 31 * count + i
            for root in roots:
                hierarchical_reduce_case(comm, mode, dtype, op, count, root, seed)
                hierarchical_bcast_case(comm, mode, dtype, count, root, seed)
            hierarchical_allgather_case(comm, mode, dtype, count, count % 2 == 0, seed)
    if mode == "nonblocking":       # shards of 1 MiB cross in 4 pipelined pieces
        count = (1 << 17) * comm.local_size + 5
        hierarchical_reduce_case(comm, mode, np.float64, al.SUM, count, comm.size - 1, 3)
        hierarchical_bcast_case(comm, mode, np.float64, count, comm.size - 1, 3)


def test_hierarchical_reduce_same_bits_in_every_mode(comm):
    """On sums that round, the root gets the same bits blocking, nonblocking and persistent,
    also in deterministic mode (where the bits are rank order's)."""
    if "hierarchical" not in al.algorithms("reduce", comm=comm):
        pytest.skip(f"hierarchical reduce needs several equal nodes, not {comm.nodes}")
    root = comm.size - 1
    for deterministic in (False, True):
        al.set_deterministic(deterministic)
        try:
            results = []
            for mode in MODES:
                result = np.zeros(2001, np.float32) if comm.rank == root else None
                run_in_mode(mode, "reduce", inexact_data(2001, np.float32, al.SUM,
                                                         comm.rank, 5),
                            comm, root=root, recvbuf=result, algo="hierarchical")
                results.append(result)
        finally:
            al.set_deterministic(False)
        if comm.rank == root:
            assert results[0].tobytes() == results[1].tobytes() == results[2].tobytes()


@pytest.mark.parametrize("op", TWO_LEVEL_OPS)
def test_hierarchical_needs_several_equal_nodes(comm, op):
    """On one node (or nodes of different sizes) the two-level algorithms are not offered and
    an explicit ``algo="hierarchical"`` is refused before anything is sent."""
    if comm.node_count > 1:
        pytest.skip("runs on one node")
    assert "hierarchical" not in al.algorithms(op, comm=comm)
    buf = np.arange(4 * comm.size, dtype=np.float32)
    call = {"reduce": lambda c: al.reduce(buf, c, algo="hierarchical"),
            "bcast": lambda c: al.bcast(buf, c, algo="hierarchical"),
            "allgather": lambda c: al.allgather(buf[:4].copy(), c, recvbuf=buf,
                                                algo="hierarchical")}[op]
    with pytest.raises(al.UnsupportedError, match="algo: hierarchical .*several nodes"):
        call(comm)
    if comm.size == 3:
        with al.MPICommunicator() as uneven:
            uneven.nodes = ((0,), (1, 2))       # as if ranks 1 and 2 shared another node
            assert "hierarchical" not in al.algorithms(op, comm=uneven)
            with pytest.raises(al.UnsupportedError, match="same number of ranks"):
                call(uneven)
    np.testing.assert_array_equal(buf, np.arange(4 * comm.size, dtype=np.float32))


# -- hierarchical allreduce on buffers the node shares (al.shared_empty, buckets) -----------

def check_shared_hierarchical(comm):
    """Shared arrays and buckets against private arrays (same bits) and numpy."""
    cases = [(4099, np.float32, al.SUM, True, False), ((1 << 19) + 3, np.float32, al.AVG,
                                                      False, True),
             (1000, np.int32, al.PROD, False, False)]
    for count, dtype, op, inplace, nonblocking in cases:
        if dtype == np.int32:
            mine = rank_data(count, dtype, comm.rank, 7)
        else:
            mine = inexact_data(count, dtype, op, comm.rank, 7)
        send = al.shared_empty(count, dtype, comm)
        send[:] = mine
        recv = send if inplace else al.shared_empty(count, dtype, comm)
        call = al.nonblocking_allreduce if nonblocking else al.allreduce
        request = call(send, comm, op=op, recvbuf=None if inplace else recv,
                       algo="hierarchical")
        if nonblocking:
            request.wait()
        private = mine.copy()
        al.allreduce(private, comm, op=op, algo="hierarchical")
        assert recv.tobytes() == private.tobytes(), f"{np.dtype(dtype)} {op.name} {count}"
        if not inplace:
            np.testing.assert_array_equal(send, mine)
        if dtype == np.int32:
            np.testing.assert_array_equal(recv, reference(count, dtype, op, comm.size, 7))
        else:
            data = np.array([inexact_data(count, dtype, op, r, 7) for r in range(comm.size)],
                            np.float64)
            exact = data.mean(0) if op is al.AVG else data.sum(0)
            np.testing.assert_allclose(recv, exact, rtol=1e-4, atol=1e-3)
    bucket = al.GradientBucket([(3, 5), (7,)], np.float32, comm, op=al.AVG)
    assert not bucket.memory.flags.owndata              # in the node's shared segment
    for step in range(2):
        values = rank_data(22, np.float32, comm.rank, step)
        bucket.memory[:] = values
        bucket.start()
        bucket.wait()
        np.testing.assert_array_equal(bucket.memory,
                                      reference(22, np.float32, al.AVG, comm.size, step))


def test_hierarchical_allreduce_reads_and_writes_shared_buffers_in_place(comm):
    skip_unless_offered(comm, "hierarchical")
    if comm.local_size == 1:
        pytest.skip("no other rank on this node to share memory with")
    with al.MPICommunicator() as fresh:                 # its segments go with it
        check_shared_hierarchical(fresh)
