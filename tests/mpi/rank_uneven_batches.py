"""Batches that do not divide by the ranks, and ranks whose data ends early, on every rank.

Every result is compared with a two-layer network trained in numpy, written here
(forward, backward and SGD by hand): ``shard(pad=False)`` + ``gradient_scale="samples"``
equals full-batch training for every batch size, rank and place count (empty shares
included); ``ex.join`` lets ranks run different numbers of steps, each step averaging over
the ranks (or the samples) that took part; ``aluminum.torch.DistributedDataParallel`` under
torch's ``Join`` does the same for torch."""
import numpy as np
import pytest
from mpi4py import MPI

import aluminum.executor as ex
from aluminum.executor import layers

STEPS, LR, HIDDEN = 5, 0.2, 4


def build(dtype="float64"):
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 11
    with ex.program_guard(main, startup):
        x = layers.data("x", [3], dtype)
        y = layers.data("y", [1], dtype)
        out = layers.fc(layers.fc(x, HIDDEN, act="tanh", name="h"), 1, name="out")
        loss = layers.mean(layers.square_error_cost(out, y))
        ex.SGD(LR).minimize(loss)
    return main, startup, loss


def batch(size, seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(size, 3)).astype(dtype), rng.normal(size=(size, 1)).astype(dtype)


# -- the numpy reference ----------------------------------------------------------------------

def gradients(p, x, y):
    """d mean((tanh(x W1 + b1) W2 + b2 - y)^2) / d p, by hand."""
    hidden = np.tanh(x @ p["h.w"] + p["h.b"])
    d_out = 2 * (hidden @ p["out.w"] + p["out.b"] - y) / len(x)
    d_pre = (d_out @ p["out.w"].T) * (1 - hidden ** 2)
    return {"out.w": hidden.T @ d_out, "out.b": d_out.sum(0), "h.w": x.T @ d_pre,
            "h.b": d_pre.sum(0)}


def sgd(p, grads):
    return {name: p[name] - LR * grads[name] for name in p}


def average(all_grads, weights):
    total = sum(weights)
    return {name: sum(w * g[name] for w, g in zip(weights, all_grads)) / total
            for name in all_grads[0]}


# -- the executor -------------------------------------------------------------------------------

def start(comm, scale, places=1, dtype="float64", **build_options):
    main, startup, loss = build(dtype)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    initial = {name: scope[name].copy() for name in ("h.w", "h.b", "out.w", "out.b")}
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm,
                                 places=[f"cpu:{i}" for i in range(places)],
                                 build_strategy=ex.BuildStrategy(gradient_scale=scale,
                                                                 **build_options))
    return runner, loss, scope, initial


def trained(scope, initial):
    return {name: scope[name].copy() for name in initial}


def assert_close(result, expected, rtol=1e-10):
    for name in expected:
        np.testing.assert_allclose(result[name], expected[name], rtol=rtol, atol=rtol * 1e-3,
                                   err_msg=name)


def assert_same_on_every_rank(result):
    everyone = MPI.COMM_WORLD.allgather(result)
    for other in everyone[1:]:
        for name in result:
            np.testing.assert_array_equal(other[name], everyone[0][name], err_msg=name)


def train_sharded(comm, size, scale, pad, places=1, **options):
    runner, loss, scope, initial = start(comm, scale, places, **options)
    x, y = batch(size, dtype=options.get("dtype", "float64"))
    feed = {"x": ex.shard(x, comm.size, comm.rank, pad=pad),
            "y": ex.shard(y, comm.size, comm.rank, pad=pad)}
    for _ in range(STEPS):
        runner.run([loss], feed)
    runner.close()
    return trained(scope, initial), initial


def full_batch(initial, size):
    p, (x, y) = initial, batch(size)
    for _ in range(STEPS):
        p = sgd(p, gradients(p, x, y))
    return p


@pytest.mark.parametrize("size", [25, 1, 3, 13])
@pytest.mark.parametrize("options", [{}, {"places": 2}, {"fuse_all_reduce_ops": True},
                                     {"reduce_strategy": "reduce"}],
                         ids=["plain", "2 places", "fused", "reduce"])
def test_uneven_shards_weighted_by_samples_equal_the_full_batch(comm, size, options):
    """Every batch size, including shares of one sample and empty ones (size < ranks)."""
    result, initial = train_sharded(comm, size, "samples", pad=False, **options)
    assert_close(result, full_batch(initial, size))
    assert_same_on_every_rank(result)


def test_samples_in_float32(comm):
    result, initial = train_sharded(comm, 25, "samples", pad=False, dtype="float32")
    expected = full_batch({k: v.astype(np.float64) for k, v in initial.items()}, 25)
    assert_close(result, expected, rtol=1e-4)


def test_places_without_a_communicator_weight_their_samples():
    main, startup, loss = build()
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    initial = {name: scope[name].copy() for name in ("h.w", "h.b", "out.w", "out.b")}
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                 places=["cpu:0", "cpu:1", "cpu:2"],
                                 build_strategy=ex.BuildStrategy(gradient_scale="samples"))
    x, y = batch(7)
    for _ in range(STEPS):
        runner.run([loss], {"x": x, "y": y})
    runner.close()
    assert_close(trained(scope, initial), full_batch(initial, 7))


def test_padded_shards_are_not_the_full_batch(comm):
    """What the docs say: pad=True trains on the wrapped-around samples twice."""
    result, initial = train_sharded(comm, 25, "coeff_num_device", pad=True)
    deviation = max(np.max(np.abs(result[k] - v) / np.max(np.abs(v)))
                    for k, v in full_batch(initial, 25).items())
    assert (deviation > 1e-4) == (comm.size > 1), deviation


def test_shard_deals_as_array_split():
    x = np.arange(25 * 2).reshape(25, 2)
    for shards in (1, 2, 3, 4, 30):
        parts = [ex.shard(x, shards, r, pad=False) for r in range(shards)]
        for part, expected in zip(parts, np.array_split(x, shards)):
            np.testing.assert_array_equal(part, expected)
    assert ex.shard(list("abcde"), 2, 1, pad=False) == ["d", "e"]


@pytest.mark.parametrize("call, words", [
    (lambda: ex.shard(np.arange(4), 2, 0, pad="no"), ["pad", "True or False", "'no'"]),
    (lambda: ex.shard(np.arange(4), 0, 0), ["num_shards", "positive", "0"]),
    (lambda: ex.shard(np.arange(4), 2, 2), ["shard_id", "< 2", "2"]),
    (lambda: ex.shard(5, 2, 0), ["dataset", "int"]),
    (lambda: ex.data_parallel_program(build()[0], build()[2].name, 2, "mean"),
     ["gradient_scale", "samples", "'mean'"]),
])
def test_bad_arguments_name_argument_expected_and_given(call, words):
    with pytest.raises(ex.ProgramError) as raised:
        call()
    for word in words:
        assert word in str(raised.value)


def test_samples_needs_a_batched_input():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        w = layers.create_parameter((1,), "float64", "w")
        loss = layers.mean(layers.scale(w, 2.0))
        ex.SGD(0.1).minimize(loss)
    with pytest.raises(ex.ProgramError, match="gradient_scale: 'samples'.*reads none"):
        ex.data_parallel_program(main, loss.name, 2, "samples")


# -- ranks whose data ends early (ex.join) --------------------------------------------------------

def steps_of(rank, size, early):
    """The last rank ends ``early`` steps before the others."""
    return STEPS - early if rank == size - 1 and size > 1 else STEPS


def rank_batch(rank, step):
    return batch(3 + (rank + step) % 3, seed=100 * rank + step)   # 3-5 samples


def joined_reference(initial, size, early, scale, divide_by_initial_world_size=False):
    p = initial
    for step in range(STEPS):
        active = [r for r in range(size) if step < steps_of(r, size, early)]
        data = [rank_batch(r, step) for r in active]
        grads = [gradients(p, x, y) for x, y in data]
        if scale == "samples":
            mean = average(grads, [len(x) for x, _ in data])
        else:
            mean = average(grads, [1] * len(active))
            if divide_by_initial_world_size:
                mean = {k: v * len(active) / size for k, v in mean.items()}
        p = sgd(p, mean)
    return p


@pytest.mark.parametrize("early", [1, 3, STEPS])
@pytest.mark.parametrize("scale, divide", [("coeff_num_device", False),
                                           ("coeff_num_device", True), ("samples", False)])
def test_join_averages_over_the_ranks_that_took_part(comm, early, scale, divide):
    runner, loss, scope, initial = start(comm, scale, fuse_all_reduce_ops=True,
                                         fuse_grad_size_mb=1e-4, first_bucket_mb=1e-5)
    with ex.join(runner, divide_by_initial_world_size=divide):
        for step in range(steps_of(comm.rank, comm.size, early)):
            x, y = rank_batch(comm.rank, step)
            runner.run([loss], {"x": x, "y": y})
    result = trained(scope, initial)
    runner.close()
    assert_close(result, joined_reference(initial, comm.size, early, scale, divide))
    assert_same_on_every_rank(result)


def test_join_twice_and_training_after(comm):
    """Two epochs of unequal length, then a step outside any join."""
    runner, loss, scope, initial = start(comm, "coeff_num_device")
    for _ in range(2):
        with ex.join(runner):
            for step in range(steps_of(comm.rank, comm.size, 2)):
                runner.run([loss], dict(zip("xy", rank_batch(comm.rank, step))))
    x, y = batch(4 * comm.size, seed=9)
    runner.run([loss], {"x": ex.shard(x, comm.size, comm.rank),
                        "y": ex.shard(y, comm.size, comm.rank)})
    result = trained(scope, initial)
    runner.close()
    p = joined_reference(initial, comm.size, 2, "coeff_num_device")
    p = joined_reference(p, comm.size, 2, "coeff_num_device")
    assert_close(result, sgd(p, gradients(p, x, y)))


def test_join_refuses_ranks_that_disagree(comm):
    runner, loss, scope, initial = start(comm, "coeff_num_device")
    if comm.size == 1:
        return
    with pytest.raises(ex.ProgramError, match="rank 1 joins with other settings"):
        with ex.join(runner, divide_by_initial_world_size=comm.rank == 1):
            pass
    runner.close()


def test_join_refuses_what_it_cannot_shadow(comm):
    runner, *_ = start(comm, "coeff_num_device", reduce_strategy="reduce")
    with pytest.raises(ex.ProgramError, match="reduce_strategy='all_reduce'"):
        ex.join(runner)
    runner.close()
    main, startup, loss = build()
    alone = ex.ParallelExecutor(main, loss_name=loss.name, scope=ex.Scope(),
                                places=["cpu:0", "cpu:1"])
    with pytest.raises(ex.ProgramError, match="comm="):
        ex.join(alone)
    alone.close()
    with pytest.raises(ex.ProgramError, match="divide_by_initial_world_size"):
        ex.join(runner, divide_by_initial_world_size=1)


# -- aluminum.torch.DistributedDataParallel under torch's Join ----------------------------------

@pytest.fixture(scope="module")
def world():
    pytest.importorskip("torch")
    import torch.distributed as dist

    import aluminum.torch  # noqa: F401  (registers the backend)
    dist.init_process_group("aluminum")
    yield dist.group.WORLD
    dist.destroy_process_group()


def torch_model(initial):
    """The reference network in torch, starting from ``initial``."""
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(3, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, 1)).double()
    with torch.no_grad():
        for layer, name in ((model[0], "h"), (model[2], "out")):
            layer.weight.copy_(torch.from_numpy(initial[f"{name}.w"].T))
            layer.bias.copy_(torch.from_numpy(initial[f"{name}.b"]))
    return model


def torch_params(model):
    return {"h.w": model[0].weight.detach().numpy().T.copy(),
            "h.b": model[0].bias.detach().numpy().copy(),
            "out.w": model[2].weight.detach().numpy().T.copy(),
            "out.b": model[2].bias.detach().numpy().copy()}


def numpy_initial():
    rng = np.random.default_rng(5)
    return {"h.w": rng.normal(size=(3, HIDDEN)), "h.b": rng.normal(size=HIDDEN) * 0.1,
            "out.w": rng.normal(size=(HIDDEN, 1)), "out.b": np.zeros(1)}


@pytest.mark.parametrize("early", [1, 3, STEPS])
@pytest.mark.parametrize("divide", [False, True])
@pytest.mark.parametrize("how", ["ddp.join()", "Join([ddp])"])
def test_torch_ddp_join_averages_over_the_ranks_that_took_part(world, early, divide, how):
    import torch
    from torch.distributed.algorithms.join import Join

    from aluminum.torch import DistributedDataParallel
    if how == "Join([ddp])" and early != 3:
        pytest.skip("one case is enough to show the generic context manager")
    rank, size = world.comm.rank, world.comm.size
    initial = numpy_initial()
    model = torch_model(initial)
    ddp = DistributedDataParallel(model, world.comm, bucket_cap_mb=1e-4, first_bucket_mb=1e-5)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    with ddp.join(divide) if how == "ddp.join()" else \
            Join([ddp], divide_by_initial_world_size=divide):
        for step in range(steps_of(rank, size, early)):
            x, y = (torch.from_numpy(a) for a in rank_batch(rank, step))
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()
    result = torch_params(model)
    ddp.close()
    assert_close(result, joined_reference(initial, size, early, "coeff_num_device", divide))
    assert_same_on_every_rank(result)


def test_torch_ddp_join_broadcasts_buffers_from_a_rank_still_running(world):
    """A buffer counting forwards: each forward takes it from the lowest active rank (rank 0
    ends first here), so after the join it counts every iteration, on every rank."""
    import torch

    from aluminum.torch import DistributedDataParallel

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 1).double()
            self.register_buffer("forwards", torch.zeros(1, dtype=torch.float64))

        def forward(self, x):
            self.forwards += 1
            return self.linear(x)

    rank, size = world.comm.rank, world.comm.size
    ddp = DistributedDataParallel(Counting(), world.comm)
    with ddp.join():
        for step in range(STEPS - (2 if rank == 0 and size > 1 else 0)):
            ddp(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
    assert ddp.module.forwards.item() == STEPS
    ddp.close()


def test_torch_join_refuses_a_bad_setting(world):
    import torch

    from aluminum.torch import DistributedDataParallel
    ddp = DistributedDataParallel(torch.nn.Linear(3, 1).double(), world.comm)
    with pytest.raises(ValueError, match="divide_by_initial_world_size: expected True or "
                                         "False, got 'yes'"):
        ddp.join("yes")
    ddp.close()


def test_ranks_with_other_gradient_scales_are_refused(comm):
    if comm.size == 1:
        return
    scale = "samples" if comm.rank == 1 else "coeff_num_device"
    with pytest.raises(ex.ProgramError, match="gradient_scale: every rank must use the same; "
                                              "rank 0 uses 'coeff_num_device', rank 1 'samples'"):
        start(comm, scale)
