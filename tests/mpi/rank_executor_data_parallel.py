"""Data-parallel training on the executor, on every rank: after K steps every rank's
parameters equal a single-process run on the full batch, and each other bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import aluminum.executor as ex
from aluminum.executor import layers

BATCH = 24     # divisible by 1, 2, 3 and 4 ranks x 1 or 2 places: every share the same size


def build(lr=0.1, parallel_do=0, dtype="float64"):
    """The model; ``parallel_do``: its forward pass inside a ParallelDo over that many
    places."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 3
    with ex.program_guard(main, startup):
        x = layers.data("x", [5], dtype)
        y = layers.data("y", [1], "int64")

        def forward(x, y):
            hidden = layers.fc(x, 8, act="tanh", dtype=dtype, name="h")
            logits = layers.fc(hidden, 3, dtype=dtype, name="out")
            return layers.mean(layers.softmax_with_cross_entropy(logits, y))
        if parallel_do:
            pd = layers.ParallelDo([f"cpu:{i}" for i in range(parallel_do)])
            with pd.do():
                pd.write_output(forward(pd.read_input(x), pd.read_input(y)))
            loss = layers.mean(pd())
        else:
            loss = forward(x, y)
        ex.Momentum(lr, 0.9).minimize(loss)
    return main, startup, loss


def data(dtype="float64"):
    rng = np.random.default_rng(7)
    return rng.normal(size=(BATCH, 5)).astype(dtype), rng.integers(0, 3, (BATCH, 1))


def params(program, scope):
    return {v.name: scope[v.name].copy() for v in program.global_block().vars.values()
            if v.is_parameter}


def single_process(steps, lr=0.1, dtype="float64"):
    main, startup, loss = build(lr, dtype=dtype)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    x, y = data(dtype)
    for _ in range(steps):
        ex.Executor().run(main, {"x": x, "y": y}, [loss], scope)
    return params(main, scope)


def data_parallel(comm, steps, scale="coeff_num_device", threads=2, before_op=None, lr=0.1,
                  places=1, parallel_do=0, dtype="float64", **build_options):
    main, startup, loss = build(lr, parallel_do, dtype)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    if comm.rank:   # rank 0's initial parameters must reach everyone
        for name in params(main, scope):
            scope[name] = scope[name] + 1.0
    x, y = data(dtype)
    feed = {"x": ex.shard(x, comm.size, comm.rank), "y": ex.shard(y, comm.size, comm.rank)}
    if scale == "customized":
        feed[loss.name + "@GRAD"] = np.full(1, 1.0 / (comm.size * places), dtype)
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm,
                                 places=[f"cpu:{i}" for i in range(places)],
                                 build_strategy=ex.BuildStrategy(gradient_scale=scale,
                                                                 **build_options),
                                 exec_strategy=ex.ExecutionStrategy(threads, before_op=before_op))
    for _ in range(steps):
        runner.run([loss], feed)
    runner.close()
    return params(main, scope)


def assert_same_on_every_rank(result):
    everyone = MPI.COMM_WORLD.allgather(result)
    for other in everyone[1:]:
        for name in result:
            np.testing.assert_array_equal(other[name], everyone[0][name], err_msg=name)


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-10), ("float32", 1e-5)])
@pytest.mark.parametrize("places", [1, 2])
@pytest.mark.parametrize("scale", ["coeff_num_device", "customized"])
def test_equals_single_process_on_the_full_batch(comm, scale, places, dtype, rtol):
    result = data_parallel(comm, 5, scale, places=places, dtype=dtype)
    reference = single_process(5, dtype=dtype)
    for name, value in reference.items():
        assert result[name].dtype == np.dtype(dtype)
        np.testing.assert_allclose(result[name], value, rtol=rtol, atol=rtol * 1e-2,
                                   err_msg=name)
    assert_same_on_every_rank(result)


@pytest.mark.parametrize("options", [
    {"fuse_all_reduce_ops": True, "fuse_grad_size_mb": 1e-4, "first_bucket_mb": 1e-5},
    {"fuse_all_reduce_ops": True},
    {"overlap": False},
    {"reduce_strategy": "reduce"},
    {"reduce_strategy": "reduce", "fuse_all_reduce_ops": True, "fuse_grad_size_mb": 1e-4,
     "first_bucket_mb": 1e-5},
    {"reduce_strategy": "reduce", "fuse_all_reduce_ops": True},
    {"places": 2, "fuse_all_reduce_ops": True},
    {"places": 2, "reduce_strategy": "reduce"},
    {"parallel_do": 2},
    {"parallel_do": 2, "fuse_all_reduce_ops": True},
], ids=["small buckets", "one bucket", "no overlap", "reduce", "reduce, small buckets",
        "reduce, one bucket", "2 places, fused", "2 places, reduce", "parallel_do",
        "parallel_do, fused"])
def test_fusion_and_overlap_do_not_change_the_result(comm, options):
    result = data_parallel(comm, 4, **options)
    for name, value in single_process(4).items():
        np.testing.assert_allclose(result[name], value, rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    assert_same_on_every_rank(result)


def test_buckets_follow_the_backward_order_with_a_small_first_one():
    main, _, loss = build()
    program = ex.data_parallel_program(main, loss.name, 2, fuse_grad_size_mb=1e-3,
                                       first_bucket_mb=1e-4)
    fused = [op for op in program.global_block().ops if op.type == "fused_allreduce"]
    assert [op.attrs["bucket"] for op in fused] == list(range(len(fused)))
    assert fused[0].inputs["X"] == ["out.b@GRAD"]          # finished first, 24 B < 104 B
    names = [n for op in fused for n in op.inputs["X"]]
    assert sorted(names) == sorted(p + "@GRAD" for p in ("h.w", "h.b", "out.w", "out.b"))


def test_gradient_scale_one_sums_the_gradients(comm):
    """Summed gradients (scale "one") step like averaged ones with the rate times N."""
    result = data_parallel(comm, 3, "one", lr=0.1)
    reference = single_process(3, lr=0.1 * comm.size)
    for name, value in reference.items():
        np.testing.assert_allclose(result[name], value, rtol=1e-10, atol=1e-12,
                                   err_msg=name)


@pytest.fixture
def cross_rank_checks(monkeypatch):
    """AL_DEBUG=1 for one test: every collective first compares its signature across ranks,
    so an allreduce issued out of order fails instead of matching the wrong one."""
    from aluminum import debug
    monkeypatch.setattr(debug, "ENABLED", True)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2 ** 16))
def test_random_thread_timing_keeps_one_allreduce_order(comm, seed, cross_rank_checks):
    delays = iter(np.random.default_rng(seed + comm.rank).exponential(3e-4, 100000))

    def jitter(handle):
        import time
        time.sleep(next(delays))
    result = data_parallel(comm, 2, threads=4, before_op=jitter)
    assert_same_on_every_rank(result)
    for name, value in single_process(2).items():
        np.testing.assert_allclose(result[name], value, rtol=1e-10, atol=1e-12)


def test_shard_wraps_around_like_mindspore():
    assert ex.shard(list(range(5)), 2, 0) == [0, 2, 4]
    assert ex.shard(list(range(5)), 2, 1) == [1, 3, 0]
    with pytest.raises(ex.ProgramError, match="shard_id"):
        ex.shard([1], 2, 2)


@pytest.mark.parametrize("difference", ["extra layer", "fusion on one rank"])
def test_ranks_running_different_programs_fail_naming_the_gradient(comm, difference):
    """Every rank raises at construction, before any allreduce could hang or mismatch."""
    if comm.size < 2:
        pytest.skip("needs two ranks to disagree")
    main, startup, loss = build()
    options = {}
    if comm.rank == 1 and difference == "extra layer":
        ex.reset_unique_names()
        main, startup = ex.Program(), ex.Program()
        with ex.program_guard(main, startup):
            x = layers.data("x", [5], "float64")
            y = layers.data("y", [1], "int64")
            hidden = layers.fc(x, 8, act="tanh", dtype="float64", name="h")
            hidden = layers.fc(hidden, 8, act="tanh", dtype="float64", name="extra")
            logits = layers.fc(hidden, 3, dtype="float64", name="out")
            loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
            ex.Momentum(0.1, 0.9).minimize(loss)
    if comm.rank == 1 and difference == "fusion on one rank":
        options = {"fuse_all_reduce_ops": True}
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    expected = "extra" if difference == "extra layer" else "allreduce"
    with pytest.raises(ex.ProgramError, match=expected):
        ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm,
                            build_strategy=ex.BuildStrategy(**options))


def test_the_reduce_strategy_shards_the_optimizer():
    """Every parameter has one owner, owners balanced by bytes; each rank keeps only its
    own parameters' optimizer ops, and every parameter is broadcast from its owner."""
    main, _, loss = build()
    sizes = {"h.w": 40, "h.b": 8, "out.w": 24, "out.b": 3}
    for ranks in (1, 2, 3):
        programs = [ex.data_parallel_program(main, loss.name, ranks, reduce_strategy="reduce",
                                             rank=r) for r in range(ranks)]
        owner = {op.inputs["X"][0]: op.attrs["root"] for op in programs[0].global_block().ops
                 if op.type == "broadcast"}
        assert sorted(owner) == sorted(sizes)
        load = [sum(sizes[p] for p, r in owner.items() if r == rank) for rank in range(ranks)]
        assert max(load) - min(load) <= max(sizes.values())
        for rank, program in enumerate(programs):
            updated = {op.inputs["Param"][0] for op in program.global_block().ops
                       if op.type == "momentum"}
            assert updated == {p for p, r in owner.items() if r == rank}


def test_the_data_parallel_context_makes_executors_data_parallel(comm):
    """MindSpore's switch: no comm= anywhere, yet each rank trains on its shard and the
    parameters equal the single-process run on the full batch."""
    ex.set_parallel_context(parallel_mode=ex.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                            comm=comm)
    try:
        main, startup, loss = build()
        scope = ex.Scope()
        ex.Executor().run(startup, scope=scope)
        x, y = data()
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope)
        for _ in range(3):
            runner.run([loss], {"x": ex.shard(x, comm.size, comm.rank),
                                "y": ex.shard(y, comm.size, comm.rank)})
        runner.close()
    finally:
        ex.reset_parallel_context()
    for name, value in single_process(3).items():
        np.testing.assert_allclose(scope[name], value, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("mean", [True, False])
def test_grad_reducer_sums_or_averages_every_gradient(comm, mean):
    def grads_of(rank):
        rng = np.random.default_rng(100 + rank)
        return [rng.normal(size=(3, 2)), rng.normal(size=5).astype(np.float32),
                rng.normal(size=1), np.zeros((0,))]
    reducer = ex.GradReducer(comm, mean=mean)
    for _ in range(2):                   # the second call reuses the buckets' plans
        reduced = reducer(grads_of(comm.rank))
    everyone = [grads_of(rank) for rank in range(comm.size)]
    for index, got in enumerate(reduced):
        total = sum(grads[index].astype(np.float64) for grads in everyone)
        expected = total / comm.size if mean else total
        assert got.shape == everyone[0][index].shape
        assert got.dtype == everyone[0][index].dtype
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
