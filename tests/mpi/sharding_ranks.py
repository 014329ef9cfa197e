"""SEMI_AUTO_PARALLEL training on 2 and 4 ranks (tests/test_sharding.py launches it).

Each model is trained K steps by the ParallelExecutor with MindSpore-style strategies; the
parameters, gathered from every rank's part (boxes of numpy.array_split, computed here),
are compared with the same training written in numpy alone (float64, rtol 1e-10); the
collectives each step issues are counted.  Every check is agreed over all ranks (one
allgather of the outcome) so that a failure on one rank fails them all at once.
"""
import numpy as np
import pytest
from mpi4py import MPI

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers
from sharded_checks import agree, gathered

WORLD = MPI.COMM_WORLD
SIZE, RANK = WORLD.Get_size(), WORLD.Get_rank()
STEPS, LR, BATCH = 3, 0.5, 8


@pytest.fixture(scope="module")
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


@pytest.fixture(autouse=True)
def semi_auto(comm):
    ex.set_parallel_context(parallel_mode=ex.ParallelMode.SEMI_AUTO_PARALLEL, comm=comm)
    yield
    ex.reset_parallel_context()


# -- the reference: numpy alone ------------------------------------------------------------

def ce_forward(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    loss = -np.log(probs[np.arange(len(labels)), labels]).mean()
    grad = probs.copy()
    grad[np.arange(len(labels)), labels] -= 1
    return loss, grad / len(labels)


def mlp_reference(params, batches, blocks):
    p = {k: v.copy() for k, v in params.items()}
    losses = []
    for x, y in batches:
        h0 = np.tanh(x @ p["inp.w"] + p["inp.b"])
        h, saved = h0, []
        for b in range(blocks):
            z = h @ p[f"col{b}.w"] + p[f"col{b}.b"]
            a = np.maximum(z, 0)
            saved.append((h, z, a))
            h = a @ p[f"row{b}.w"] + p[f"row{b}.b"]
        logits = h @ p["out.w"] + p["out.b"]
        loss, dlogits = ce_forward(logits, y.reshape(-1))
        losses.append(loss)
        g = {"out.w": h.T @ dlogits, "out.b": dlogits.sum(0)}
        dh = dlogits @ p["out.w"].T
        for b in reversed(range(blocks)):
            hin, z, a = saved[b]
            g[f"row{b}.w"], g[f"row{b}.b"] = a.T @ dh, dh.sum(0)
            dz = (dh @ p[f"row{b}.w"].T) * (z > 0)
            g[f"col{b}.w"], g[f"col{b}.b"] = hin.T @ dz, dz.sum(0)
            dh = dz @ p[f"col{b}.w"].T
        dz0 = dh * (1 - h0 ** 2)
        g["inp.w"], g["inp.b"] = x.T @ dz0, dz0.sum(0)
        for k in p:
            p[k] -= LR * g[k]
    return p, losses


def vocab_reference(params, batches):
    p = {k: v.copy() for k, v in params.items()}
    for ids, y in batches:
        e = p["emb.w"][ids.reshape(-1)]
        r = e.reshape(BATCH, -1)
        logits = np.tanh(r @ p["cls.w"] + p["cls.b"])
        _, dlogits = ce_forward(logits, y.reshape(-1))
        dz = dlogits * (1 - logits ** 2)
        g = {"cls.w": r.T @ dz, "cls.b": dz.sum(0)}
        de = (dz @ p["cls.w"].T).reshape(e.shape)
        g["emb.w"] = np.zeros_like(p["emb.w"])
        np.add.at(g["emb.w"], ids.reshape(-1), de)
        for k in p:
            p[k] -= LR * g[k]
    return p


# -- the models ----------------------------------------------------------------------------

def build_mlp(tp, dp, blocks, width=6, hidden=9, classes=5):
    """Megatron blocks (column- then row-parallel fc) after a fc on the input, so that
    every block's input needs its gradient; ``dp`` splits the batch."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", (BATCH, width), "float64", append_batch_size=False)
        y = layers.data("y", (BATCH, 1), "int64", append_batch_size=False)
        h = layers.fc(x, width, act="tanh", name="inp", shard=((dp, 1), (1, 1)))
        for b in range(blocks):
            a = layers.fc(h, hidden, act="relu", name=f"col{b}", shard=((dp, 1), (1, tp)))
            h = layers.fc(a, width, name=f"row{b}", shard=((dp, tp), (tp, 1)))
        logits = layers.fc(h, classes, name="out", shard=((dp, 1), (1, 1)))
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        ex.SGD(LR).minimize(loss)
    return main, startup, loss


def build_vocab(tp, vocab=11, width=3, classes=7):
    """Vocabulary-parallel embedding (rows split), reshape, column-parallel fc, class-
    parallel cross-entropy (Megatron's)."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        ids = layers.data("ids", (2 * BATCH, 1), "int64", append_batch_size=False)
        y = layers.data("y", (BATCH, 1), "int64", append_batch_size=False)
        e = layers.embedding(ids, (vocab, width), name="emb.w", dtype="float64",
                             shard=((tp, 1), (1, 1)))
        r = layers.reshape(e, (BATCH, 2 * width))
        logits = layers.fc(r, classes, act="tanh", name="cls", shard=((1, 1), (1, tp)))
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y,
                                                             shard=((1, tp), (1, 1))))
        ex.SGD(LR).minimize(loss)
    return main, startup, loss


def initial(main, seed):
    rng = np.random.default_rng(seed)
    return {v.name: rng.normal(scale=0.5, size=v.shape)
            for v in main.global_block().vars.values() if v.is_parameter}


def train(main, startup, loss, params, batches, names, sequential=False, build=None):
    """K steps by the ParallelExecutor (with ``build``, a BuildStrategy) or,
    ``sequential``, the Executor running the pass's program; the program run, the scope,
    each step's calls and losses."""
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    for name, value in params.items():
        scope[name] = value.copy()
    if sequential:
        program = ex.shard_program(main, ex.get_parallel_context().communicator(), loss.name)
        executor = ex.Executor()
        run = lambda feed: executor.run(program, feed, [loss.name], scope)  # noqa: E731
    else:
        pe = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, build_strategy=build)
        program = pe.program
        run = lambda feed: pe.run([loss.name], feed=feed)  # noqa: E731
    calls, losses = [], []
    for batch in batches:
        with ex.count_traffic() as traffic:
            losses.append(run(dict(zip(names, batch)))[0][0])
        calls.append([call[:2] for call in traffic.calls])
    if not sequential:
        pe.close()
    return program, scope, calls, losses


def assert_trained_as_numpy(program, scope, losses, expected, expected_losses):
    """The losses and every parameter, gathered from the ranks' parts, as numpy's."""
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-10)
    for name, value in expected.items():
        np.testing.assert_allclose(gathered(program, scope, name), value, rtol=1e-10,
                                   atol=1e-12, err_msg=name)


def mlp_batches(seed, width=6, classes=5):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(BATCH, width)),
             rng.integers(0, classes, size=(BATCH, 1)).astype(np.int64))
            for _ in range(STEPS)]


@pytest.mark.parametrize("tp, dp, sequential", [(SIZE, 1, False), (SIZE, 1, True)] +
                         ([(2, 2, False)] if SIZE == 4 else []))
def test_megatron_mlp_trains_as_one_process(tp, dp, sequential):
    blocks = 2
    main, startup, loss = build_mlp(tp, dp, blocks)
    params = initial(main, 7)
    batches = mlp_batches(8)
    program, scope, calls, losses = train(main, startup, loss, params, batches, ["x", "y"],
                                          sequential)
    expected, expected_losses = mlp_reference(params, batches, blocks)

    def check():
        assert_trained_as_numpy(program, scope, losses, expected, expected_losses)
        if dp == 1:   # one allreduce forward and one backward per block, nothing else
            assert all(step == [("allreduce", tp)] * (2 * blocks) for step in calls), calls
        else:
            layout = program.global_block().var("col0.w").layout
            assert [str(p) for p in layout.placements] == ["R", "S(1)"], layout
    agree(check)


@pytest.mark.parametrize("tp, dp, cap_mb, calls_per_step", [
    (1, SIZE, 32.0, 1 + 1),      # data parallel: the loss's sum, then one bucket
    (1, SIZE, 1e-6, 1 + 12),     # a cap below every gradient: a bucket each
    (SIZE, 1, 32.0, 4),          # Megatron: its input gradients' sums are not fused
])
def test_fused_gradient_sums_train_as_one_process(tp, dp, cap_mb, calls_per_step):
    """``fuse_all_reduce_ops`` fuses a sharded program's parameter-gradient sums over
    every rank into buckets (one allreduce each); training still equals numpy's."""
    blocks = 2                   # 2 + 2 * blocks fc layers: 12 parameter gradients
    main, startup, loss = build_mlp(tp, dp, blocks)
    params = initial(main, 9)
    batches = mlp_batches(10)
    build = ex.BuildStrategy(fuse_all_reduce_ops=True, fuse_grad_size_mb=cap_mb,
                             first_bucket_mb=cap_mb)
    program, scope, calls, losses = train(main, startup, loss, params, batches, ["x", "y"],
                                          build=build)
    expected, expected_losses = mlp_reference(params, batches, blocks)

    def check():
        assert_trained_as_numpy(program, scope, losses, expected, expected_losses)
        assert all(step == [("allreduce", SIZE)] * calls_per_step for step in calls), calls
    agree(check)


def test_megatron_layouts_and_collectives_per_block():
    """2 ranks or 4 on one dimension: the column-parallel weight split by columns, the
    row-parallel one by rows, each block's output summed by one allreduce."""
    main, _, loss = build_mlp(SIZE, 1, 3)
    program = ex.shard_program(main, ex.get_parallel_context().communicator(), loss.name)
    block = program.global_block()

    def check():
        assert [str(p) for p in block.var("col1.w").layout.placements] == ["S(1)"]
        assert [str(p) for p in block.var("row1.w").layout.placements] == ["S(0)"]
        plans = [ex.plan_redistribution(ex.layouts.Layout.from_dict(op.attrs["src"]),
                                        ex.layouts.Layout.from_dict(op.attrs["dst"]),
                                        op.attrs["shape"], "float64").collectives
                 if op.type == "redistribute" else [op.type]
                 for op in block.ops if op.type in ("redistribute", "allreduce")]
        assert plans == [["allreduce"]] * 6, plans     # the input gradients' by the op
    agree(check)


def test_vocabulary_parallel_embedding_and_cross_entropy():
    main, startup, loss = build_vocab(SIZE)
    params = initial(main, 11)
    rng = np.random.default_rng(12)
    batches = [(rng.integers(0, 11, size=(2 * BATCH, 1)).astype(np.int64),
                rng.integers(0, 7, size=(BATCH, 1)).astype(np.int64)) for _ in range(STEPS)]
    program, scope, calls, _ = train(main, startup, loss, params, batches, ["ids", "y"])
    expected = vocab_reference(params, batches)

    def check():
        types = {op.type for op in program.global_block().ops}
        assert {"sharded_lookup_table", "sharded_softmax_with_cross_entropy"} <= types
        for name, value in expected.items():
            np.testing.assert_allclose(gathered(program, scope, name), value, rtol=1e-10,
                                       atol=1e-12, err_msg=name)
    agree(check)


@pytest.mark.parametrize("strategy, message", [
    (((3, 1), (1, 1)), "does not divide the mesh" if SIZE > 3 else "larger than the"),
    (((1, 1), (1, 2 * SIZE)), "a mesh larger than the communicator"),
    (((2, 1), (2, 1)), "splits dimension 'k' in 1 and in 2 parts"),
    (((1,), (1, 1)), "one entry per dimension"),
])
def test_a_bad_strategy_is_a_program_error_on_every_rank(strategy, message):
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", (BATCH, 6), "float64", append_batch_size=False)
        out = layers.mean(layers.fc(x, 4, shard=strategy))
    try:
        ex.ParallelExecutor(main, loss_name=out.name, scope=ex.Scope())
        error = None
    except ex.ProgramError as exc:
        error = str(exc)
    errors = WORLD.allgather(error)
    assert all(e is not None and e == errors[0] for e in errors), errors
    assert "op matmul" in errors[0] and str(strategy) in errors[0], errors[0]
    assert "expected ((m, k), (k, n))" in errors[0] and message in errors[0], errors[0]


def test_the_searched_strategies_train_as_one_process():
    """The search's strategies for a wide and a deep-narrow chain (tanh fc layers, widths
    uneven over the ranks) train as numpy does."""
    from aluminum.executor.sharding.search import Layer, search
    for widths in ((6, 40, 40, 5), (6, 7, 7, 7, 5)):
        chain = [Layer(BATCH, a, b) for a, b in zip(widths, widths[1:])]
        strategies, _ = search(chain, SIZE)
        ex.reset_unique_names()
        main, startup = ex.Program(), ex.Program()
        with ex.program_guard(main, startup):
            h = layers.data("x", (BATCH, widths[0]), "float64", append_batch_size=False)
            t = layers.data("t", (BATCH, widths[-1]), "float64", append_batch_size=False)
            for i, strategy in enumerate(strategies):
                h = layers.fc(h, widths[i + 1], act="tanh", name=f"l{i}", shard=strategy)
            loss = layers.mean(layers.square_error_cost(h, t))
            ex.SGD(LR).minimize(loss)
        params = initial(main, 21)
        rng = np.random.default_rng(22)
        batches = [(rng.normal(size=(BATCH, widths[0])), rng.normal(size=(BATCH, widths[-1])))
                   for _ in range(STEPS)]
        program, scope, _, _ = train(main, startup, loss, params, batches, ["x", "t"])
        p = {k: v.copy() for k, v in params.items()}
        for x, target in batches:
            acts = [x]
            for i in range(len(strategies)):
                acts.append(np.tanh(acts[-1] @ p[f"l{i}.w"] + p[f"l{i}.b"]))
            d = 2 * (acts[-1] - target) / target.size
            for i in reversed(range(len(strategies))):
                dz = d * (1 - acts[i + 1] ** 2)
                d = dz @ p[f"l{i}.w"].T
                p[f"l{i}.w"] -= LR * acts[i].T @ dz
                p[f"l{i}.b"] -= LR * dz.sum(0)

        def check():
            for name, value in p.items():
                np.testing.assert_allclose(gathered(program, scope, name), value,
                                           rtol=1e-10, atol=1e-12,
                                           err_msg=f"{name} under {strategies}")
        agree(check)
