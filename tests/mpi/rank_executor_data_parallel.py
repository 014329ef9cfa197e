"""Data-parallel training on the executor, on every rank: after K steps every rank's
parameters equal a single-process run on the full batch, and each other bit for bit."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import aluminum.executor as ex
from aluminum.executor import layers

BATCH = 12     # divisible by 1, 2, 3 and 4 ranks: every shard the same size


def build(lr=0.1):
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 3
    with ex.program_guard(main, startup):
        x = layers.data("x", [5], "float64")
        y = layers.data("y", [1], "int64")
        hidden = layers.fc(x, 8, act="tanh", dtype="float64", name="h")
        logits = layers.fc(hidden, 3, dtype="float64", name="out")
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        ex.Momentum(lr, 0.9).minimize(loss)
    return main, startup, loss


def data():
    rng = np.random.default_rng(7)
    return rng.normal(size=(BATCH, 5)), rng.integers(0, 3, (BATCH, 1))


def params(program, scope):
    return {v.name: scope[v.name].copy() for v in program.global_block().vars.values()
            if v.is_parameter}


def single_process(steps, lr=0.1):
    main, startup, loss = build(lr)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    x, y = data()
    for _ in range(steps):
        ex.Executor().run(main, {"x": x, "y": y}, [loss], scope)
    return params(main, scope)


def data_parallel(comm, steps, scale="coeff_num_device", threads=2, before_op=None, lr=0.1,
                  **build_options):
    main, startup, loss = build(lr)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    if comm.rank:   # rank 0's initial parameters must reach everyone
        for name in params(main, scope):
            scope[name] = scope[name] + 1.0
    x, y = data()
    feed = {"x": ex.shard(x, comm.size, comm.rank), "y": ex.shard(y, comm.size, comm.rank)}
    if scale == "customized":
        feed[loss.name + "@GRAD"] = np.full(1, 1.0 / comm.size)
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm,
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


@pytest.mark.parametrize("scale", ["coeff_num_device", "customized"])
def test_equals_single_process_on_the_full_batch(comm, scale):
    result = data_parallel(comm, 5, scale)
    reference = single_process(5)
    for name, value in reference.items():
        np.testing.assert_allclose(result[name], value, rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    assert_same_on_every_rank(result)


@pytest.mark.parametrize("options", [
    {"fuse_all_reduce_ops": True, "fuse_grad_size_mb": 1e-4, "first_bucket_mb": 1e-5},
    {"fuse_all_reduce_ops": True},
    {"overlap": False},
], ids=["small buckets", "one bucket", "no overlap"])
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


@settings(max_examples=4)
@given(seed=st.integers(0, 2 ** 16))
def test_random_thread_timing_keeps_one_allreduce_order(comm, seed):
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
