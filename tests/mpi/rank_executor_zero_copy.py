"""Gradients written straight into their allreduce buckets, on every rank: the producers'
outputs are the buckets' memory, training equals a numpy reference and the copying run
(``gradients_in_buckets=False``), and the hazards fall back to a copy."""
import gc
import warnings

import numpy as np
import pytest
from mpi4py import MPI
from numpy.lib.stride_tricks import sliding_window_view

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers

BATCH = 24          # an equal share for 1-4 ranks x 1-2 places
LR, MU = 0.1, 0.9
REDUCERS = ("allreduce", "fused_allreduce", "reduce", "fused_reduce")
GRID = [(places, strategy, fused) for places in (1, 2) for strategy in ("all_reduce", "reduce")
        for fused in (False, True)]
GRID_IDS = [f"{p} place{'s' * (p > 1)}, {s}{', fused' if f else ''}" for p, s, f in GRID]


def build():
    """conv (3x3, 2 filters, bias) -> relu -> fc "a" (tanh) -> a 4x4 weight applied twice
    (its gradient is a sum of two) -> fc "out" -> softmax cross-entropy, Momentum."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 5
    with ex.program_guard(main, startup):
        x = layers.data("x", [1, 5, 5], "float64")
        y = layers.data("y", [1], "int64")
        hidden = layers.relu(layers.conv2d(x, 2, 3, name="conv"))
        hidden = layers.fc(layers.reshape(hidden, [-1, 18]), 4, act="tanh", name="a")
        shared = layers.create_parameter((4, 4), "float64", "shared")
        for _ in range(2):
            hidden = layers.tanh(layers.matmul(hidden, shared))
        logits = layers.fc(hidden, 3, name="out")
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        ex.Momentum(LR, MU).minimize(loss)
    return main, startup, loss


def data():
    rng = np.random.default_rng(11)
    return rng.normal(size=(BATCH, 1, 5, 5)), rng.integers(0, 3, (BATCH, 1))


def parameter_names(program):
    return sorted(v.name for v in program.global_block().vars.values() if v.is_parameter)


def numpy_gradients(p, x, y, scale=1.0):
    """The model's gradients of ``scale`` x the mean loss over ``x``, by hand in numpy."""
    n = len(x)
    windows = sliding_window_view(x, (3, 3), axis=(2, 3))           # [n, c, p, q, i, j]
    conv = np.einsum("ncpqij,mcij->nmpq", windows, p["conv.w"]) + p["conv.b"]
    flat = np.maximum(conv, 0).reshape(n, 18)
    a = np.tanh(flat @ p["a.w"] + p["a.b"])
    z1 = np.tanh(a @ p["shared"])
    z2 = np.tanh(z1 @ p["shared"])
    logits = z2 @ p["out.w"] + p["out.b"]
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    d_logits = probs.copy()
    d_logits[np.arange(n), y[:, 0]] -= 1
    d_logits *= scale / n
    g = {"out.w": z2.T @ d_logits, "out.b": d_logits.sum(0)}
    d_pre2 = (d_logits @ p["out.w"].T) * (1 - z2 ** 2)
    d_pre1 = (d_pre2 @ p["shared"].T) * (1 - z1 ** 2)
    g["shared"] = z1.T @ d_pre2 + a.T @ d_pre1
    d_pre_a = (d_pre1 @ p["shared"].T) * (1 - a ** 2)
    g["a.w"], g["a.b"] = flat.T @ d_pre_a, d_pre_a.sum(0)
    d_conv = (d_pre_a @ p["a.w"].T).reshape(conv.shape) * (conv > 0)
    g["conv.w"] = np.einsum("nmpq,ncpqij->mcij", d_conv, windows)
    g["conv.b"] = d_conv.sum((0, 2, 3)).reshape(p["conv.b"].shape)
    return g


def numpy_training(initial, steps, out_b_scale=1.0):
    """Momentum on the full batch, from ``initial``."""
    params = {name: value.copy() for name, value in initial.items()}
    velocity = {name: np.zeros_like(value) for name, value in params.items()}
    x, y = data()
    for _ in range(steps):
        grads = numpy_gradients(params, x, y)
        grads["out.b"] = grads["out.b"] * out_b_scale
        for name, grad in grads.items():
            velocity[name] = MU * velocity[name] + grad
            params[name] = params[name] - LR * velocity[name]
    return params


class Training:
    """One rank's data-parallel run of ``program`` (built by ``build``) on its shard."""

    def __init__(self, comm, places=1, threads=2, before_op=None, program=None, **options):
        self.main, startup, self.loss = build() if program is None else program
        self.scope = ex.Scope()
        ex.Executor().run(startup, scope=self.scope)
        self.initial = {name: self.scope[name].copy() for name in parameter_names(self.main)}
        x, y = data()
        self.feed = {"x": ex.shard(x, comm.size, comm.rank),
                     "y": ex.shard(y, comm.size, comm.rank)}
        self.runner = ex.ParallelExecutor(
            self.main, loss_name=self.loss.name, scope=self.scope, comm=comm,
            places=[f"cpu:{i}" for i in range(places)],
            build_strategy=ex.BuildStrategy(**options),
            exec_strategy=ex.ExecutionStrategy(threads, before_op=before_op))

    def steps(self, count, fetch=()):
        for _ in range(count):
            fetched = self.runner.run([self.loss, *fetch], self.feed)
        return fetched

    def parameters(self):
        return {name: self.scope[name].copy() for name in self.initial}

    def close(self):
        self.runner.close()


def strategy_options(strategy, fused):
    options = {"reduce_strategy": strategy}
    if fused:   # several buckets of several gradients
        options.update(fuse_all_reduce_ops=True, fuse_grad_size_mb=5e-4, first_bucket_mb=1e-4)
    return options


def assert_same_on_every_rank(result):
    everyone = MPI.COMM_WORLD.allgather(result)
    for other in everyone[1:]:
        for name in result:
            np.testing.assert_array_equal(other[name], everyone[0][name], err_msg=name)


def trained(comm, steps, in_buckets, **kwargs):
    training = Training(comm, gradients_in_buckets=in_buckets, **kwargs)
    training.steps(steps)
    result, initial = training.parameters(), training.initial
    training.close()
    return result, initial


@pytest.mark.parametrize("places, strategy, fused", GRID, ids=GRID_IDS)
def test_equals_numpy_and_the_copying_run(comm, places, strategy, fused):
    options = strategy_options(strategy, fused)
    zero_copy, initial = trained(comm, 3, True, places=places, **options)
    copying, _ = trained(comm, 3, False, places=places, **options)
    reference = numpy_training(initial, 3)
    for name, value in reference.items():
        np.testing.assert_allclose(zero_copy[name], value, rtol=1e-10, atol=1e-13,
                                   err_msg=name)
        np.testing.assert_allclose(zero_copy[name], copying[name], rtol=1e-10, atol=1e-13,
                                   err_msg=name)
    assert_same_on_every_rank(zero_copy)


def watch_reductions(seen):
    """A ``before_op`` hook recording, for each reduction op, the arrays it is given, and
    for each per-place ``sum``, its inputs (keyed by op and name)."""
    def before_op(handle):
        if handle.op.type in REDUCERS or handle.op.type == "sum":
            for name in handle.op.inputs["X"]:
                seen[handle.op.type in REDUCERS, name] = scope_of[0][name]
    scope_of = []
    return before_op, scope_of


@pytest.mark.parametrize("places, strategy, fused", GRID, ids=GRID_IDS)
def test_producers_write_into_the_buckets(comm, places, strategy, fused):
    """Each reduction finds every gradient already in its bucket: the array its producer
    wrote is the op's output, the same memory step after step; no per-place part of a
    gradient (the inputs of ``sum``) is in a bucket."""
    seen = {}
    before_op, scope_of = watch_reductions(seen)
    training = Training(comm, places=places, before_op=before_op,
                        **strategy_options(strategy, fused))
    scope_of.append(training.scope)
    names = [name + "@GRAD" for name in training.initial]
    views = {}
    for step in range(2):
        training.steps(1)
        for name in names:
            written = seen[True, name]
            assert written is training.scope[name], f"step {step}: {name} was copied in"
            assert views.setdefault(name, written) is written
    everything = [views[name] for name in names]
    parts = [value for (reduced, _), value in seen.items() if not reduced]
    assert parts     # the shared weight's two contributions, and with 2 places every part
    for part in parts:
        assert not any(np.shares_memory(part, view) for view in everything)
    training.close()


def test_a_gradient_read_before_its_reduction_keeps_its_copy(comm):
    """An op reading ``out.w@GRAD`` before its allreduce (``reshape``: its output is a view
    of what it reads) still sees this rank's own gradient after the step, not the sum."""
    main, startup, loss = build()
    block = main.global_block()
    producer = next(i for i, op in enumerate(block.ops) if "out.w@GRAD" in op.output_names())
    block.create_var("peek", (12,), "float64")
    block.append_op("reshape", {"X": ["out.w@GRAD"]}, {"Out": ["peek"]}, {"shape": (12,)})
    block.ops.insert(producer + 1, block.ops.pop())
    seen = {}
    before_op, scope_of = watch_reductions(seen)
    training = Training(comm, program=(main, startup, loss), before_op=before_op,
                        overlap=False)       # every allreduce after the reshape
    scope_of.append(training.scope)
    training.steps(1)
    x, y = data()
    local = numpy_gradients(training.initial, ex.shard(x, comm.size, comm.rank),
                            ex.shard(y, comm.size, comm.rank), 1 / comm.size)
    np.testing.assert_allclose(training.scope["peek"], local["out.w"].reshape(-1),
                               rtol=1e-10, atol=1e-13)
    assert seen[True, "out.w@GRAD"] is not training.scope["out.w@GRAD"]      # copied in
    assert seen[True, "out.b@GRAD"] is training.scope["out.b@GRAD"]          # the others not
    training.close()


def test_a_gradient_written_twice_reaches_its_bucket_from_its_last_writer(comm):
    """``out.b@GRAD`` doubled in place before its reduction: the doubling (a kernel that
    ignores destinations) is the gradient's last producer, the executor copies its result
    into the bucket, and training equals numpy's with that gradient doubled."""
    main, startup, loss = build()
    block = main.global_block()
    producer = next(i for i, op in enumerate(block.ops) if "out.b@GRAD" in op.output_names())
    block.append_op("scale", {"X": ["out.b@GRAD"]}, {"Out": ["out.b@GRAD"]}, {"scale": 2.0})
    block.ops.insert(producer + 1, block.ops.pop())
    seen = {}
    before_op, scope_of = watch_reductions(seen)
    training = Training(comm, program=(main, startup, loss), before_op=before_op)
    scope_of.append(training.scope)
    training.steps(3)
    assert seen[True, "out.b@GRAD"] is training.scope["out.b@GRAD"]
    for name, value in numpy_training(training.initial, 3, out_b_scale=2.0).items():
        np.testing.assert_allclose(training.scope[name], value, rtol=1e-10, atol=1e-13,
                                   err_msg=name)
    training.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_thread_timing_changes_nothing(comm, seed):
    """Four threads and random delays before every op: the same parameters as the copying
    run, on every rank."""
    delays = iter(np.random.default_rng(seed + comm.rank).exponential(2e-4, 100000))

    def jitter(handle):
        import time
        time.sleep(next(delays))
    zero_copy, _ = trained(comm, 3, True, threads=4, before_op=jitter, places=2,
                           **strategy_options("all_reduce", True))
    copying, _ = trained(comm, 3, False, places=2, **strategy_options("all_reduce", True))
    for name, value in copying.items():
        np.testing.assert_allclose(zero_copy[name], value, rtol=1e-10, atol=1e-13,
                                   err_msg=name)
    assert_same_on_every_rank(zero_copy)


def test_close_turns_the_reduced_gradients_into_copies_and_lets_the_memory_go(comm):
    """After ``close()`` no variable is a view of a bucket (the values stay), and the
    communicator is freed without a shared buffer left referenced."""
    own = al.MPICommunicator()
    training = Training(own, **strategy_options("all_reduce", True))
    training.steps(2)
    names = [name + "@GRAD" for name in training.initial]
    views = {name: training.scope[name] for name in names}
    values = {name: view.copy() for name, view in views.items()}
    training.close()
    for name in names:
        assert not np.shares_memory(training.scope[name], views[name])
        np.testing.assert_array_equal(training.scope[name], values[name])
    del views, training
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        own.free()
    assert not [w for w in caught if "still" in str(w.message)], \
        [str(w.message) for w in caught]
