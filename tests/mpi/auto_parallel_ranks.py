"""AUTO_PARALLEL on 2 and 4 ranks (tests/test_auto_parallel.py launches it).

The ParallelExecutor searches the strategies itself: with a given cost model (so the
choice does not depend on this machine) an Adam-trained MLP comes out data parallel, and
model parallel (every weight split) under a memory bound below data parallelism's; both
train as numpy alone does (float64, rtol 1e-10).  An unsupported graph is the same
ProgramError on every rank; the calibrated model (no cost model given) is the same on
every rank and cached; a strategy checkpoint saves the choice and pins a later one, and
one that does not fit the program is the same ProgramError on every rank.  The bytes and
collectives the model prices per step are those the runtime counts, for every strategy.
"""
import dataclasses
import json

import numpy as np
import pytest
from mpi4py import MPI

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers
from aluminum.executor.sharding.auto import fc_chain
from aluminum.executor.sharding.search import (CostModel, Layer, candidates, data_parallel,
                                               estimate, model_parallel, search)
from sharded_checks import agree, gathered

WORLD = MPI.COMM_WORLD
SIZE, RANK = WORLD.Get_size(), WORLD.Get_rank()
STEPS, LR = 2, 0.01
BATCH, WIDTH, DEPTH = 192, 128, 6
MODEL = CostModel(alpha=2e-6, beta=2e-10, flops=5e9, bandwidth=1e10, op=5e-6, call=1e-5)


@pytest.fixture(scope="module")
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


@pytest.fixture(autouse=True)
def context(comm):
    yield
    ex.reset_parallel_context()


def build():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        h = layers.data("x", (BATCH, WIDTH), "float64", append_batch_size=False)
        t = layers.data("t", (BATCH, WIDTH), "float64", append_batch_size=False)
        for i in range(DEPTH):
            h = layers.fc(h, WIDTH, act="tanh", name=f"l{i}")
        loss = layers.mean(layers.square_error_cost(h, t))
        ex.Adam(LR).minimize(loss)
    return main, startup, loss


def reference(params, batches):
    p = {k: v.copy() for k, v in params.items()}
    m1 = {k: np.zeros_like(v) for k, v in p.items()}
    m2 = {k: np.zeros_like(v) for k, v in p.items()}
    b1, b2 = 0.9, 0.999
    for x, target in batches:
        acts = [x]
        for i in range(DEPTH):
            acts.append(np.tanh(acts[-1] @ p[f"l{i}.w"] + p[f"l{i}.b"]))
        d = 2 * (acts[-1] - target) / target.size
        grads = {}
        for i in reversed(range(DEPTH)):
            dz = d * (1 - acts[i + 1] ** 2)
            d = dz @ p[f"l{i}.w"].T
            grads[f"l{i}.w"], grads[f"l{i}.b"] = acts[i].T @ dz, dz.sum(0)
        rate = LR * np.sqrt(1 - b2) / (1 - b1)
        for k, g in grads.items():
            m1[k] = 0.9 * m1[k] + 0.1 * g
            m2[k] = 0.999 * m2[k] + 0.001 * g * g
            p[k] = p[k] - rate * m1[k] / (np.sqrt(m2[k]) + 1e-8)
        b1, b2 = b1 * 0.9, b2 * 0.999
    return p


def train(comm, **context):
    """The MLP trained STEPS steps by a ParallelExecutor in AUTO_PARALLEL (searching with
    MODEL, ``context``: more of set_parallel_context's arguments): the search's answer,
    the program, the scope, and numpy's parameters after the same steps."""
    ex.set_parallel_context(parallel_mode=ex.ParallelMode.AUTO_PARALLEL, comm=comm,
                            cost_model=MODEL, **context)
    main, startup, loss = build()
    rng = np.random.default_rng(3)
    params = {v.name: rng.normal(scale=0.2, size=v.shape)
              for v in main.global_block().vars.values() if v.is_parameter}
    batches = [(rng.normal(size=(BATCH, WIDTH)), rng.normal(size=(BATCH, WIDTH)))
               for _ in range(STEPS)]
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    for name, value in params.items():
        scope[name] = value.copy()
    pe = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope)
    for x, t in batches:
        pe.run([loss.name], feed={"x": x, "t": t})
    pe.close()
    return pe.program.auto_parallel, pe.program, scope, reference(params, batches)


def assert_trained_as_numpy(program, scope, expected, strategies):
    for name, value in expected.items():
        np.testing.assert_allclose(gathered(program, scope, name), value, rtol=1e-10,
                                   atol=1e-12, err_msg=f"{name} under {strategies}")


@pytest.mark.parametrize("bounded", [False, True])
def test_the_executor_searches_and_trains_as_numpy(comm, bounded):
    chain = [Layer(BATCH, WIDTH, WIDTH, True, None, 2)] * DEPTH
    dp = estimate(chain, SIZE, [data_parallel(SIZE)] * DEPTH, MODEL)
    bound = 0.95 * dp.memory / 2**20 if bounded else None
    found, program, scope, expected = train(comm, max_memory_mb=bound)

    def check():
        assert found.strategies == search(chain, SIZE, MODEL, max_memory=found.max_memory)[0]
        if bounded:   # model parallel: every weight split, within the bound
            assert all(s[1][1] > 1 or s[0][1] > 1 for s in found.strategies), found.strategies
            assert found.estimate.memory <= bound * 2**20 < dp.memory
        else:
            assert found.strategies == [data_parallel(SIZE)] * DEPTH, found.strategies
        weight = program.global_block().var("l1.w").layout
        assert (str(weight.placements[-1]) == "R") != bounded, weight
        assert_trained_as_numpy(program, scope, expected, found.strategies)
    agree(check)


def test_a_strategy_checkpoint_saves_the_choice_and_pins_the_layers_it_names(
        comm, tmp_path_factory):
    """Saved: every layer's weight, shape and strategy for this many ranks.  Loaded: a
    file naming two layers (Megatron's first two, which the search would not choose with
    MODEL) keeps them; the search chooses the rest given them; training equals numpy."""
    folder = WORLD.bcast(str(tmp_path_factory.mktemp("strategies")))
    saved_path, pinned_path = f"{folder}/saved.json", f"{folder}/pinned.json"
    found, _, _, _ = train(comm, strategy_ckpt_save_file=saved_path)
    saved = json.loads(open(saved_path).read())
    megatron = model_parallel(DEPTH, SIZE)
    if RANK == 0:
        with open(pinned_path, "w") as out:
            json.dump({"format": "aluminum strategy checkpoint", "version": 1, "ranks": SIZE,
                       "layers": [{"weight": f"l{i}.w", "strategy": megatron[i]}
                                  for i in (0, 1)]}, out)
    WORLD.Barrier()
    ex.reset_parallel_context()
    pinned, program, scope, expected = train(comm, strategy_ckpt_load_file=pinned_path)

    def check():
        assert saved["ranks"] == SIZE and [layer["weight"] for layer in saved["layers"]] == \
            [f"l{i}.w" for i in range(DEPTH)], saved
        assert [tuple(map(tuple, layer["strategy"])) for layer in saved["layers"]] == \
            found.strategies == [data_parallel(SIZE)] * DEPTH
        assert all(layer["shape"] == [WIDTH, WIDTH] for layer in saved["layers"])
        chain = [Layer(BATCH, WIDTH, WIDTH, True, megatron[i] if i < 2 else None, 2)
                 for i in range(DEPTH)]
        assert pinned.strategies[:2] == megatron[:2], pinned.strategies
        assert pinned.strategies == search(chain, SIZE, MODEL)[0]
        assert_trained_as_numpy(program, scope, expected, pinned.strategies)
    agree(check)


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it"),
    ({"format": "aluminum strategy checkpoint", "version": 1, "ranks": SIZE + 1,
      "layers": []}, f"saved for {SIZE + 1} ranks; this communicator has {SIZE}"),
    ({"format": "aluminum strategy checkpoint", "version": 1, "ranks": SIZE,
      "layers": [{"weight": "l9.w", "strategy": [[1, 1], [1, 1]]}]},
     "layer 'l9.w' is not a weight of this program's fc chain"),
])
def test_a_strategy_checkpoint_that_does_not_fit_is_the_same_error_on_every_rank(
        comm, tmp_path_factory, content, message):
    path = WORLD.bcast(str(tmp_path_factory.mktemp("bad") / "strategies.json"))
    if RANK == 0 and content is not None:
        with open(path, "w") as out:
            json.dump(content, out)
    WORLD.Barrier()
    try:
        train(comm, strategy_ckpt_load_file=path)
        error = None
    except ex.ProgramError as exc:
        error = str(exc)
    errors = WORLD.allgather(error)
    assert all(e is not None and e == errors[0] for e in errors), errors
    assert message in errors[0] and path in errors[0], errors[0]


def test_an_unsupported_graph_is_a_program_error_on_every_rank(comm):
    ex.set_parallel_context(parallel_mode=ex.ParallelMode.AUTO_PARALLEL, comm=comm,
                            cost_model=MODEL)
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", (8, 6), "float64", append_batch_size=False)
        a = layers.fc(x, 4, name="a")
        b = layers.fc(x, 4, name="b")              # a branch, not a chain
        out = layers.mean(layers.elementwise_add(a, b))
    try:
        ex.ParallelExecutor(main, loss_name=out.name, scope=ex.Scope())
        error = None
    except ex.ProgramError as exc:
        error = str(exc)
    errors = WORLD.allgather(error)
    assert all(e is not None and e == errors[0] for e in errors), errors
    assert "op matmul #2 (out matmul_2): it reads 'x', not the previous layer's output" \
        in errors[0], errors[0]
    assert "AUTO_PARALLEL searches chains of fc layers" in errors[0]


def test_the_calibrated_model_is_the_same_on_every_rank_and_cached(comm, tmp_path_factory,
                                                                  monkeypatch):
    from aluminum.executor.sharding import calibrate
    path = WORLD.bcast(str(tmp_path_factory.mktemp("cal") / "rates.json"))
    monkeypatch.setenv("AL_AUTO_PARALLEL_FILE", path)
    first = calibrate.machine_model(comm)
    models = WORLD.allgather(first)
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: 1 / 0)   # cached: not called
    second = calibrate.machine_model(comm)

    def check():
        assert all(m == models[0] for m in models), models
        assert second == first
        assert first.flops > 0 and first.bandwidth > 0 and first.op > 0 and first.call >= 0 \
            and first.activation > 0
        assert (first.alpha, first.beta) == tuple(calibrate.alpha_beta())
        groups = [g for g in range(2, SIZE + 1) if SIZE % g == 0]
        assert sorted((kind, group) for kind, group, _, _ in first.steps) == sorted(
            [(kind, g) for g in groups
             for kind in ("allreduce", "reduce_scatter", "allgather", "alltoall")] +
            [("sum", SIZE)])
        assert all(alpha >= 0 and beta >= 0 for _, _, alpha, beta in first.steps)
        assert any(alpha > 0 for _, _, alpha, _ in first.steps)
        if RANK == 0:
            import json
            assert f"ranks={SIZE},itemsize=8" in json.loads(open(path).read())
    agree(check)


@pytest.mark.parametrize("fused", [False, True])
def test_the_model_prices_the_bytes_and_collectives_the_runtime_counts(comm, fused):
    """For every candidate strategy on every layer, data parallel then Megatron, and
    Megatron: one training step's bytes received (summed over ranks) and collective calls,
    as ``ex.count_traffic`` counts them, equal the model's estimate (uneven shapes: batch
    10 and widths 7, 5, 3 on 4 ranks; the split loss's sum included).  Fused, the model
    gives a mix of strategies a share of the buckets by bytes, not a whole count: its
    calls are compared where every layer has one strategy."""
    widths = (6, 7, 5, 3)
    depth = len(widths) - 1
    mixes = [[s] * depth for s in candidates(SIZE)] + [
        [data_parallel(SIZE)] + model_parallel(depth - 1, SIZE), model_parallel(depth, SIZE)]
    rng = np.random.default_rng(5)
    feed = {"x": rng.normal(size=(10, widths[0])), "t": rng.normal(size=(10, widths[-1]))}
    for shards in mixes:
        ex.set_parallel_context(parallel_mode=ex.ParallelMode.SEMI_AUTO_PARALLEL, comm=comm)
        ex.reset_unique_names()
        main, startup = ex.Program(), ex.Program()
        with ex.program_guard(main, startup):
            h = layers.data("x", (10, widths[0]), "float64", append_batch_size=False)
            t = layers.data("t", (10, widths[-1]), "float64", append_batch_size=False)
            for i, width in enumerate(widths[1:]):
                h = layers.fc(h, width, act="tanh", name=f"l{i}", shard=shards[i])
            loss = layers.mean(layers.square_error_cost(h, t))
            ex.SGD(0.1).minimize(loss)
        scope = ex.Scope()
        ex.Executor().run(startup, scope=scope)
        strategy = ex.BuildStrategy(fuse_all_reduce_ops=fused, first_bucket_mb=1e-4,
                                    fuse_grad_size_mb=2e-4)
        pe = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                 build_strategy=strategy)
        ex.reset_parallel_context()
        pe.run([loss.name], feed)                  # (the first step makes sub-communicators)
        with ex.count_traffic() as traffic:
            pe.run([loss.name], feed)
        pe.close()
        received = WORLD.allreduce(traffic.received, op=MPI.SUM)
        calls = WORLD.allgather(len(traffic.calls))
        model = dataclasses.replace(MODEL, buckets=(strategy.first_bucket_mb,
                                                    strategy.fuse_grad_size_mb)
                                    if fused else None)
        predicted = estimate(fc_chain(main)[0], SIZE, shards, model)

        def check():
            assert received == predicted.moved, (shards, received, predicted.moved)
            if not fused or len(set(shards)) == 1:
                assert max(calls) == pytest.approx(predicted.collectives), (shards, calls)
        agree(check)
