"""Placement on every rank: one program, each rank runs its part (issue 27).

After K steps the parameters where they live (the pservers; the model split's two ranks)
equal a single-process full-batch run written here in numpy alone (never the library's
kernels), float64 to rtol 1e-10; the trainers' copies equal it one step behind (what the
pservers sent them at the start of the last step).
"""
import numpy as np
import pytest
from mpi4py import MPI

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers
from aluminum.executor.placement.place_pass import slice_rows, slices_of

SIZE = MPI.COMM_WORLD.Get_size()
BATCH, FEATURES, HIDDEN, STEPS, LR = 24, 5, 8, 4, 0.1
PARAMS = ("h.w", "h.b", "out.w", "out.b")


def needs(*sizes):
    return pytest.mark.skipif(SIZE not in sizes, reason=f"needs {' or '.join(map(str, sizes))}"
                              f" ranks, this job has {SIZE}")


def data():
    rng = np.random.default_rng(11)
    return rng.normal(size=(BATCH, FEATURES)), rng.normal(size=(BATCH, 1))


DECAY = {"boundaries": [2], "values": [LR, LR / 4]}   # piecewise: the lr after step 2


def optimizer(name):
    return {"sgd": lambda: ex.SGD(LR), "momentum": lambda: ex.Momentum(LR, 0.9),
            "adam": lambda: ex.Adam(0.05), "sgd_decay": lambda: ex.SGD(LR, **DECAY)}[name]()


def build(opt="sgd", split=None, dtype="float64"):
    """The two-layer regression; ``split``: (group of layer 1, group of layer 2)."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 5
    first = ex.place_guard(split[0]) if split else _nothing()
    second = ex.place_guard(split[1]) if split else _nothing()
    with ex.program_guard(main, startup):
        with first:
            x = layers.data("x", [FEATURES], dtype)
            hidden = layers.fc(x, HIDDEN, act="tanh", name="h")
        with second:
            y = layers.data("y", [1], dtype)
            loss = layers.mean(layers.square_error_cost(layers.fc(hidden, 1, name="out"), y))
        optimizer(opt).minimize(loss)
    return main, startup, loss


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# -- the independent reference -------------------------------------------------------------

def reference(initial, steps, opt, rows=None):
    """Full-batch training in numpy: forward, hand-written backward, the update rules;
    ``rows(step)``: train step ``step`` on the first rows of the batch only."""
    p = {k: v.copy() for k, v in initial.items()}
    whole_x, whole_y = data()
    state = {k: {"v": np.zeros_like(v), "m": np.zeros_like(v), "s": np.zeros_like(v),
                 "b1": 0.9, "b2": 0.999} for k, v in p.items()}
    for step in range(steps):
        lr = DECAY["values"][int(step >= DECAY["boundaries"][0])] if opt == "sgd_decay" else LR
        x, y = (whole_x, whole_y) if rows is None else (whole_x[:rows(step)],
                                                         whole_y[:rows(step)])
        h = np.tanh(x @ p["h.w"] + p["h.b"])
        d = h @ p["out.w"] + p["out.b"] - y
        dp = 2 * d / d.size
        dz = (dp @ p["out.w"].T) * (1 - h * h)
        grads = {"out.w": h.T @ dp, "out.b": dp.sum(0), "h.w": x.T @ dz, "h.b": dz.sum(0)}
        for k, g in grads.items():
            s = state[k]
            if opt in ("sgd", "sgd_decay"):
                p[k] = p[k] - lr * g
            elif opt == "momentum":
                s["v"] = 0.9 * s["v"] + g
                p[k] = p[k] - LR * s["v"]
            else:
                s["m"] = 0.9 * s["m"] + 0.1 * g
                s["s"] = 0.999 * s["s"] + 0.001 * g * g
                rate = 0.05 * np.sqrt(1 - s["b2"]) / (1 - s["b1"])
                p[k] = p[k] - rate * s["m"] / (np.sqrt(s["s"]) + 1e-8)
                s["b1"] *= 0.9
                s["b2"] *= 0.999
    return p


def values_here(main, scope, cluster, rank):
    """{param: (rows or None, value)} of the parameters (or slices) this rank owns."""
    block, held = main.global_block(), {}
    for name in PARAMS:
        pieces = slices_of(block, name)
        if pieces:
            for piece, rows in zip(pieces, slice_rows(block, name)):
                if rank in cluster.ranks(piece.place):
                    held[name] = (rows, scope[piece.name])
        elif rank in cluster.ranks(block.var(name).place):
            held[name] = (None, scope[name])
    return held


TOLERANCE = {"float64": dict(rtol=1e-10, atol=1e-12), "float32": dict(rtol=1e-5, atol=1e-6)}


def check_owned(main, scope, cluster, expected, rank, dtype="float64"):
    held = values_here(main, scope, cluster, rank)
    for name, (rows, value) in held.items():
        want = expected[name] if rows is None else expected[name][rows[0]:rows[1]]
        np.testing.assert_allclose(value, want, **TOLERANCE[dtype], err_msg=name)
    return held


# -- parameter server ----------------------------------------------------------------------

def ps_train(comm, spec, opt, executor="parallel", steps=STEPS, dtype="float64", **strategy):
    cluster = ex.Cluster.from_spec(spec, comm)
    main, startup, loss = build(opt, dtype=dtype)
    ex.place(main, ex.ParameterServerStrategy(**strategy), cluster)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    initial = {k: scope[k].astype(np.float64) for k in PARAMS}
    trainers = cluster.roles["trainer"]
    x, y = (v.astype(dtype) for v in data())
    feed = {}
    if comm.rank in trainers:
        for k in PARAMS:       # the trainers' own values must never be used
            scope[k] = scope[k] + 1.0
        index = trainers.index(comm.rank)
        feed = {"x": ex.shard(x, len(trainers), index), "y": ex.shard(y, len(trainers), index)}
    if executor == "parallel":
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm)
        if len(trainers) > 1:     # the SSA graph shows the transfers this rank runs
            assert {"bcast_var", "reduce_var"} <= {h.op.type for h in runner.graph.ops}
        losses = [runner.run([loss], feed)[0] for _ in range(steps)]
        runner.close()
    else:
        run = ex.Executor()
        losses = [run.run(main, feed, [loss], scope)[0] for _ in range(steps)]
    return cluster, main, scope, initial, losses


def check_ps(comm, spec, opt, executor="parallel", dtype="float64", **strategy):
    cluster, main, scope, initial, losses = ps_train(comm, spec, opt, executor, dtype=dtype,
                                                     **strategy)
    if comm.rank in cluster.roles["trainer"]:
        assert all(loss is not None for loss in losses)
        behind = reference(initial, STEPS - 1, opt)
        for name in PARAMS:    # what the pservers sent at the start of the last step
            np.testing.assert_allclose(scope[name], behind[name], **TOLERANCE[dtype])
        return cluster, main, {}
    assert losses == [None] * STEPS          # the pserver holds no loss
    held = check_owned(main, scope, cluster, reference(initial, STEPS, opt), comm.rank, dtype)
    return cluster, main, held


def owned_everywhere(comm, cluster, held):
    """Every parameter row is owned by exactly one pserver."""
    counts = {name: 0 for name in PARAMS}
    rows = comm.mpi_comm.allgather({k: (r, v.shape[0] if v.ndim else 1)
                                    for k, (r, v) in held.items()})
    for ranks_held in rows:
        for name, (r, n) in ranks_held.items():
            counts[name] += n
    return counts


@needs(3)
@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam", "sgd_decay"])
def test_two_trainers_one_pserver(comm, opt):
    cluster, main, held = check_ps(comm, "trainer:2,pserver:1", opt)
    if comm.rank == 2:
        assert set(held) == set(PARAMS)


@needs(3)
def test_a_step_moves_the_parameters_out_and_their_gradients_in_once(comm):
    """Per step, counted by ``ex.count_traffic`` on each rank: the pserver sends every
    parameter to both trainers and receives both trainers' gradients (57 float64 values:
    5 x 8 + 8 + 8 + 1, 456 bytes each way per trainer), as the planner's routes of the
    transfers (the layouts planner's) say for every rank."""
    cluster = ex.Cluster.from_spec("trainer:2,pserver:1", comm)
    main, startup, loss = build("sgd")
    ex.place(main, ex.ParameterServerStrategy(), cluster)
    placed = ex.plan_transfers(main)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    trainers = cluster.roles["trainer"]
    feed = {}
    if comm.rank in trainers:
        index = trainers.index(comm.rank)
        feed = {name: ex.shard(value, 2, index) for name, value in zip("xy", data())}
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm)
    runner.run([loss], feed)          # (first step: channels and plans made)
    with ex.count_traffic() as traffic:
        runner.run([loss], feed)
    runner.close()
    by_hand = (912, 912) if comm.rank == 2 else (456, 456)
    assert (traffic.sent, traffic.received) == by_hand
    planned = (sum(t.route.bytes_sent(comm.rank) for t in placed.transfers),
               sum(t.route.bytes_received(comm.rank) for t in placed.transfers))
    assert planned == by_hand
    assert {t.kind for t in placed.transfers} == {"bcast", "reduce"}


@needs(3)
def test_float32_within_1e_5(comm):
    check_ps(comm, "trainer:2,pserver:1", "momentum", dtype="float32")


@needs(3)
def test_parameter_server_equals_data_parallel_allreduce(comm):
    """The same program trained data-parallel (allreduce over all 3 ranks, the batch in
    thirds) ends where the pserver's parameters end."""
    cluster, main, scope, _, _ = ps_train(comm, "trainer:2,pserver:1", "momentum")
    on_pserver = comm.mpi_comm.bcast({k: scope[k] for k in PARAMS} if comm.rank == 2
                                     else None, root=2)
    dp_main, dp_startup, dp_loss = build("momentum")
    dp_scope = ex.Scope()
    ex.Executor().run(dp_startup, scope=dp_scope)
    x, y = data()
    feed = {"x": ex.shard(x, comm.size, comm.rank), "y": ex.shard(y, comm.size, comm.rank)}
    runner = ex.ParallelExecutor(dp_main, loss_name=dp_loss.name, scope=dp_scope, comm=comm)
    for _ in range(STEPS):
        runner.run([dp_loss], feed)
    runner.close()
    for name in PARAMS:
        np.testing.assert_allclose(dp_scope[name], on_pserver[name], rtol=1e-10, atol=1e-12)


@needs(3)
def test_two_trainers_one_pserver_sequential_executor(comm):
    check_ps(comm, "trainer:2,pserver:1", "momentum", executor="sequential")


@needs(3)
def test_sliced_parameter_one_trainer_two_pservers(comm):
    """h.w (5x8 float64, 320 bytes) is sliced over both pservers: rows 0-2 and 3-4."""
    cluster, main, held = check_ps(comm, "trainer:1,pserver:2", "adam", slice_bytes=100)
    assert [p.name for p in slices_of(main.global_block(), "h.w")] == ["h.w.block0",
                                                                       "h.w.block1"]
    counts = owned_everywhere(comm, cluster, held)
    assert counts["h.w"] == FEATURES and counts["out.w"] == HIDDEN


@needs(4)
def test_two_trainers_two_pservers_sliced_and_balanced(comm):
    cluster, main, held = check_ps(comm, "trainer:2,pserver:2", "momentum", slice_bytes=100)
    counts = owned_everywhere(comm, cluster, held)
    assert counts == {"h.w": FEATURES, "h.b": 1 * HIDDEN, "out.w": HIDDEN, "out.b": 1} or \
        counts["h.w"] == FEATURES


@needs(4)
def test_three_trainers_one_pserver(comm):
    check_ps(comm, "trainer:3,pserver:1", "sgd")


@needs(4)
def test_two_pservers_sequential_executor(comm):
    check_ps(comm, "trainer:2,pserver:2", "adam", executor="sequential")


@needs(4)
def test_learning_rate_decay_runs_on_every_pserver(comm):
    """The decay op and its step counter are replicated over both pservers."""
    cluster, main, held = check_ps(comm, "trainer:2,pserver:2", "sgd_decay")
    decay = next(op for op in main.global_block().ops if op.type == "piecewise_decay")
    assert cluster.ranks(decay.place) == (2, 3)


# -- the model split (hand placement) ------------------------------------------------------

@needs(2)
@pytest.mark.parametrize("executor", ["sequential", "parallel"])
def test_model_split_over_two_ranks(comm, executor):
    """Layer 1 on rank 0, layer 2 and the loss on rank 1: the forward pass crosses once
    (h), the backward once (h@GRAD), every step; the batch alternates between two sizes,
    so each crossing runs at two step shapes, each twice or more."""
    cluster = ex.Cluster.from_spec("trainer:2", comm)
    groups = [f"trainer/{cluster.endpoints[r]}/cpu:[0]" for r in (0, 1)]
    main, startup, loss = build("momentum", split=groups)
    ex.place(main, cluster=cluster)
    crossing = {(e.var, tuple(t.kind for t in e.transfers))
                for e in ex.plan_transfers(main).edges}
    assert crossing == {("tanh_2", ("send",)), ("tanh_2@GRAD", ("send",))}, crossing
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    initial = {k: scope[k].copy() for k in PARAMS}
    x, y = data()

    def rows(step):
        return BATCH if step % 2 == 0 else BATCH // 2

    feeds = [{"x": x[:rows(step)]} if comm.rank == 0 else {"y": y[:rows(step)]}
             for step in range(STEPS)]
    if executor == "parallel":
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm)
        losses = [runner.run([loss], feed)[0] for feed in feeds]
        runner.close()
    else:
        losses = [ex.Executor().run(main, feed, [loss], scope)[0] for feed in feeds]
    assert (losses[0] is None) == (comm.rank == 0)
    held = check_owned(main, scope, cluster, reference(initial, STEPS, "momentum", rows),
                       comm.rank)
    assert set(held) == ({"h.w", "h.b"} if comm.rank == 0 else {"out.w", "out.b"})


# -- errors on every rank, before the first step -------------------------------------------

@needs(2, 3)
def test_ranks_that_disagree_on_the_program_fail_alike(comm):
    cluster = ex.Cluster.from_spec(f"trainer:{comm.size - 1},pserver:1", comm)
    main, startup, loss = build("sgd" if comm.rank else "momentum")
    ex.place(main, ex.ParameterServerStrategy(), cluster)
    with pytest.raises(ex.ProgramError, match="placed programs disagree"):
        ex.ParallelExecutor(main, loss_name=loss.name, scope=ex.Scope(), comm=comm)


@needs(3)
def test_ranks_that_disagree_on_the_cluster_fail_alike(comm):
    spec = "trainer:2,pserver:1" if comm.rank else "trainer:1,pserver:2"
    cluster = ex.Cluster.from_spec(spec, comm)
    main, startup, loss = build("sgd")
    ex.place(main, ex.ParameterServerStrategy(), cluster)
    with pytest.raises(ex.ProgramError, match="disagree.*cluster"):
        ex.Executor().run(main, {}, [], ex.Scope())


@needs(2)
def test_placing_on_a_role_without_ranks_fails_before_running(comm):
    cluster = ex.Cluster.from_spec("trainer:2", comm)      # no pserver (Paddle #7520)
    main, _, _ = build("sgd")
    with pytest.raises(ex.ProgramError, match="'pserver' has no ranks"):
        ex.place(main, ex.ParameterServerStrategy(), cluster)
    with pytest.raises(ex.ProgramError, match="role 'pserver' has no ranks"):
        ex.Cluster.from_spec("trainer:2,pserver:0", comm)


def test_transfers_leave_communication_usable(comm):
    """Whatever ran before, the world communicator still agrees (the job's last check)."""
    value = np.ones(4)
    al.allreduce(value, comm)
    assert (value == comm.size).all()
