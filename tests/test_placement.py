"""Placement in one process: PlaceGroup strings, clusters, the pass (it only assigns), the
transfers a placed program implies and each rank's program (issue 27).  The multi-rank
training checks are tests/mpi/rank_placement.py."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum.executor as ex
from aluminum.executor import layers
from aluminum.executor.ir import PlaceGroup, Program
from aluminum.executor.placement import format_place_group, parse_place_group
from aluminum.executor.placement.place_pass import slices_of


def build(opt=None, hidden=8, decay=False):
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", [13], "float64")
        y = layers.data("y", [1], "float64")
        h = layers.fc(x, hidden, act="tanh", name="h")
        loss = layers.mean(layers.square_error_cost(layers.fc(h, 1, name="out"), y))
        options = {"boundaries": [2], "values": [0.1, 0.01]} if decay else {}
        (opt or ex.SGD)(0.1, **options).minimize(loss)
    return main, startup, loss


def ps(spec="trainer:2,pserver:1", **strategy):
    main, startup, loss = build(**{k: strategy.pop(k) for k in ("opt", "decay", "hidden")
                                if k in strategy})
    cluster = ex.Cluster.from_spec(spec)
    ex.place(main, ex.ParameterServerStrategy(**strategy), cluster)
    return main, cluster


# -- PlaceGroup strings ----------------------------------------------------------------------

@pytest.mark.parametrize("text, group", [
    ("trainer/*/cpu:[0]", PlaceGroup(("trainer",), (), ("cpu:0",))),
    ("pserver/127.0.0.1:7164/cpu:[1,2]", PlaceGroup(("pserver",), ("127.0.0.1:7164",),
                                                    ("cpu:1", "cpu:2"))),
    ("trainer/192.168.10.1:7164/cpu:[0]", PlaceGroup(("trainer",), ("192.168.10.1:7164",),
                                                     ("cpu:0",))),
    ("trainer/[10.0.0.1:1,10.0.0.2:1]/cpu:[0]", PlaceGroup(("trainer",),
                                                           ("10.0.0.1:1", "10.0.0.2:1"),
                                                           ("cpu:0",))),
])
def test_the_designs_strings_parse(text, group):
    assert parse_place_group(text) == group
    assert str(group) == text


name = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
node = st.builds(lambda a, p: f"10.0.0.{a}:{p}", st.integers(0, 255), st.integers(1, 65535))


@given(st.lists(name, min_size=1, max_size=2, unique=True),
       st.lists(node, max_size=3, unique=True), st.lists(st.integers(0, 7), max_size=3,
                                                          unique=True))
def test_place_group_strings_round_trip(roles, nodes, ids):
    group = PlaceGroup(tuple(roles), tuple(nodes), tuple(f"cpu:{i}" for i in ids))
    assert parse_place_group(format_place_group(group)) == group


@pytest.mark.parametrize("text", ["trainer", "trainer/*", "//cpu:[0]", "trainer/*/gpu[0]", 7])
def test_malformed_place_groups_are_program_errors(text):
    with pytest.raises(ex.ProgramError, match="place group"):
        parse_place_group(text)


# -- clusters --------------------------------------------------------------------------------

def test_cluster_from_spec_gives_ranks_in_order_and_default_endpoints():
    cluster = ex.Cluster.from_spec("trainer:2,pserver:1")
    assert cluster.roles == {"trainer": (0, 1), "pserver": (2,)}
    assert cluster.endpoints == ("127.0.0.1:7164", "127.0.0.1:7165", "127.0.0.1:7166")
    assert cluster.ranks(parse_place_group("trainer/*/cpu:[0]")) == (0, 1)
    assert cluster.ranks(parse_place_group("pserver/127.0.0.1:7166/cpu:[1,2]")) == (2,)


def test_cluster_with_endpoints_per_rank():
    cluster = ex.Cluster.from_spec("trainer:2,pserver:1",
                                   endpoints="10.0.0.1:7164,10.0.0.2:7164,10.0.0.3:7164")
    assert cluster.ranks(parse_place_group("trainer/10.0.0.2:7164/cpu:[0]")) == (1,)


@pytest.mark.parametrize("spec, size, match", [
    ("trainer:2,pserver:0", None, "role 'pserver' has no ranks"),
    ("trainer:2,pserver:1", 4, "names 3 ranks, expected 4"),
    ("trainer:2,trainer:1", None, "given twice"),
    ("trainer=2", None, "expected 'role:count"),
])
def test_bad_cluster_specs(spec, size, match):
    with pytest.raises(ex.ProgramError, match=match):
        ex.Cluster.from_spec(spec, size=size)


@pytest.mark.parametrize("text, match", [
    ("master/*/cpu:[0]", "role 'master' has no ranks"),
    ("trainer/10.9.9.9:1/cpu:[0]", "node '10.9.9.9:1': not in the cluster"),
    ("trainer/127.0.0.1:7166/cpu:[0]", "is a pserver"),
])
def test_unknown_roles_and_nodes_are_program_errors(text, match):
    with pytest.raises(ex.ProgramError, match=match):
        ex.Cluster.from_spec("trainer:2,pserver:1").ranks(parse_place_group(text))


def test_from_env_reads_the_launchers_roles(monkeypatch):
    monkeypatch.setenv("AL_ROLES", "trainer:1,pserver:2")

    class Comm:
        size, rank = 3, 0
    assert ex.Cluster.from_env(Comm()).roles == {"trainer": (0,), "pserver": (1, 2)}
    monkeypatch.delenv("AL_ROLES")
    with pytest.raises(ex.ProgramError, match="AL_ROLES: not set"):
        ex.Cluster.from_env(Comm())


# -- the pass --------------------------------------------------------------------------------

def test_the_pass_only_assigns_places():
    main, _, _ = build()
    before = [(op.type, op.inputs, op.outputs) for op in main.global_block().ops]
    ex.place(main, ex.ParameterServerStrategy(), ex.Cluster.from_spec("trainer:2,pserver:1"))
    assert [(op.type, op.inputs, op.outputs) for op in main.global_block().ops] == before
    assert all(op.place is not None for op in main.global_block().ops)


def test_parameter_server_strategy_puts_the_optimizer_side_on_pservers():
    main, cluster = ps(opt=ex.Adam, decay=True)
    block = main.global_block()
    for op in block.ops:
        ranks = cluster.ranks(op.place)
        if op.attrs.get("op_role") == "optimize" or op.type == "piecewise_decay":
            assert ranks == (2,), op
        else:
            assert ranks == (0, 1), op
    for var in block.vars.values():
        if var.persistable and "learning_rate" not in var.name and "lr_step" not in var.name:
            assert cluster.ranks(var.place) == (2,), var.name     # params, moments, pows


def test_parameters_are_balanced_over_pservers_by_bytes():
    main, cluster = ps("trainer:2,pserver:2", hidden=64)
    block = main.global_block()
    home = {name: cluster.ranks(block.var(name).place) for name in ("h.w", "h.b", "out.w",
                                                                     "out.b")}
    assert home["h.w"] == (2,)              # the largest alone on one pserver
    assert {home["out.w"], home["h.b"], home["out.b"]} == {(3,)}


def test_a_large_parameter_is_sliced_row_wise_into_placed_variables():
    main, cluster = ps("trainer:1,pserver:2", opt=ex.Momentum, slice_bytes=100)
    block = main.global_block()
    pieces = slices_of(block, "h.w")
    assert [(p.name, p.shape, cluster.ranks(p.place)) for p in pieces] == [
        ("h.w.block0", (7, 8), (1,)), ("h.w.block1", (6, 8), (2,))]
    assert [p.name for p in slices_of(block, "h.w@velocity")] == ["h.w@velocity.block0",
                                                                  "h.w@velocity.block1"]
    assert [p.name for p in slices_of(block, "h.w@GRAD")] == ["h.w@GRAD.block0",
                                                              "h.w@GRAD.block1"]
    assert not slices_of(block, "out.b")


def test_num_pservers_limits_the_pservers_used():
    main, cluster = ps("trainer:1,pserver:2", num_pservers=1)
    used = {cluster.ranks(op.place) for op in main.global_block().ops
            if op.attrs.get("op_role") == "optimize"}
    assert used == {(1,)}
    with pytest.raises(ex.ProgramError, match="num_pservers: expected at most 2"):
        ps("trainer:1,pserver:2", num_pservers=3)


def test_explain_placement_says_replicated_or_placed_and_where():
    main, cluster = ps("trainer:1,pserver:2", slice_bytes=100)
    text = ex.explain_placement(main)
    assert "matmul -> matmul_0: replicated over trainer on ranks [0]" in text
    assert "sgd -> out.w: placed on ranks [" in text
    assert "h.w: sliced row-wise: rows 0:7 on rank [1], rows 7:13 on rank [2]" in text


# -- transfers and per-rank programs ---------------------------------------------------------

def test_one_transfer_per_crossing_edge_in_the_parameter_server_program():
    main, _ = ps()
    placed = ex.plan_transfers(main)
    kinds = sorted((e.var, tuple(t.kind for t in e.transfers)) for e in placed.edges)
    assert kinds == sorted([(p, ("bcast",)) for p in ("h.w", "h.b", "out.w", "out.b")] +
                           [(p + "@GRAD", ("reduce",)) for p in ("h.w", "h.b", "out.w",
                                                                 "out.b")])
    assert len(placed.transfers) == len(placed.edges) == 8
    assert all(t.scale == 0.5 for t in placed.transfers if t.kind == "reduce")
    assert placed.groups == [(0, 1, 2)]


def test_sliced_edges_move_each_slice_and_concat_on_the_readers():
    main, _ = ps("trainer:2,pserver:2", slice_bytes=100)
    placed = ex.plan_transfers(main)
    edges = {e.var: e.transfers for e in placed.edges}
    assert [(t.kind, t.source, t.target, t.rows, t.receivers) for t in edges["h.w@GRAD"]] == [
        ("reduce", "h.w@GRAD", "h.w@GRAD.block0", (0, 7), (2,)),
        ("reduce", "h.w@GRAD", "h.w@GRAD.block1", (7, 13), (3,))]
    assert [(t.kind, t.source, t.senders) for t in edges["h.w"]] == [
        ("bcast", "h.w.block0", (2,)), ("bcast", "h.w.block1", (3,))]
    assert len(placed.transfers) == sum(len(e.transfers) for e in placed.edges)
    trainer = [op.type for op in main.for_rank(0).global_block().ops]
    assert trainer.count("concat") == 1 and "momentum" not in trainer and "sgd" not in trainer
    pserver = main.for_rank(3).global_block().ops
    update = next(op for op in pserver if op.type == "sgd" and "h.w.block1" in op.inputs["Param"])
    assert update.inputs["Grad"] == ["h.w@GRAD.block1"]


def test_each_rank_keeps_only_its_ops_in_one_global_order():
    main, _ = ps()
    trainer, pserver = main.for_rank(0), main.for_rank(2)
    assert {op.type for op in pserver.global_block().ops} == {"bcast_var", "reduce_var", "sgd"}
    assert "sgd" not in {op.type for op in trainer.global_block().ops}
    order = [[op.attrs["var"] for op in p.global_block().ops if "var" in op.attrs]
             for p in (trainer, main.for_rank(1), pserver)]
    assert order[0] == order[1] == order[2]          # the same transfers, the same order
    assert str(ex.plan_transfers(main).for_rank(0)) == str(trainer)   # deterministic
    # gradients leave as soon as they are made: the first reduce precedes the last grad op
    types = [op.type for op in trainer.global_block().ops]
    assert types.index("reduce_var") < max(i for i, t in enumerate(types) if t.endswith("_grad"))


def test_places_survive_json_and_place_guard_sets_them():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup), ex.place_guard("trainer/127.0.0.1:7165/cpu:[0]"):
        x = layers.data("x", [3], "float64")
        layers.fc(x, 2, name="f")
    group = parse_place_group("trainer/127.0.0.1:7165/cpu:[0]")
    assert main.global_block().var("x").place == group
    assert all(op.place == group for op in main.global_block().ops)
    again = Program.from_json(main.to_json())
    assert [op.place for op in again.global_block().ops] == [op.place for op in
                                                              main.global_block().ops]


def test_hand_placement_infers_backward_and_optimizer_places():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    cluster = ex.Cluster.from_spec("trainer:2")
    with ex.program_guard(main, startup):
        with ex.place_guard("trainer/127.0.0.1:7164/cpu:[0]"):
            x = layers.data("x", [4], "float64")
            h = layers.fc(x, 3, name="a")
        with ex.place_guard("trainer/127.0.0.1:7165/cpu:[0]"):
            loss = layers.mean(layers.fc(h, 1, name="b"))
        ex.SGD(0.1).minimize(loss)
    ex.place(main, cluster=cluster)
    for op in main.global_block().ops:
        touches = " ".join(op.input_names() + op.output_names())
        if "a." in touches and "b." not in touches:
            assert cluster.ranks(op.place) == (0,), op
        if "b." in touches:
            assert cluster.ranks(op.place) == (1,), op


def test_a_variable_with_no_placed_producer_is_a_program_error():
    main, _, _ = build()
    block = main.global_block()
    del block.ops[0]                     # nothing makes matmul_0 any more
    ex.place(main, ex.ParameterServerStrategy(), ex.Cluster.from_spec("trainer:2,pserver:1"))
    with pytest.raises(ex.ProgramError, match="'matmul_0': consumed by op elementwise_add on "
                                              r"ranks \[0, 1\], but no op producing it"):
        ex.plan_transfers(main)


def test_hand_placement_needs_some_place():
    main, _, _ = build()
    with pytest.raises(ex.ProgramError, match="no op of the program has a place"):
        ex.place(main, cluster=ex.Cluster.from_spec("trainer:2"))


def test_a_placed_program_without_a_communicator_is_a_program_error():
    main, _ = ps()
    with pytest.raises(ex.ProgramError, match="needs the job's communicator"):
        ex.Executor().run(main, {}, [], ex.Scope())
    with pytest.raises(ex.ProgramError, match="not placed"):
        build()[0].for_rank(0)


@pytest.mark.bench
def test_the_placement_bench_runs_on_three_ranks():
    """A smoke run with tiny counts (the real timings are run by hand, on a quiet machine)."""
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "aluminum.run", "-n", "3", "python", "-m",
                          "aluminum.bench.placement", "--steps", "1", "--repeats", "1",
                          "--hidden", "8", "--batch", "6", "--sizes", "64KiB"],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ps       2 pserver" in run.stdout and "r+b       65536" in run.stdout, run.stdout


@settings(max_examples=40, deadline=None)
@given(trainers=st.integers(1, 3), pservers=st.integers(1, 3),
       opt=st.sampled_from([ex.SGD, ex.Momentum, ex.Adam]), decay=st.booleans(),
       slice_bytes=st.sampled_from([64, 1 << 20]), hidden=st.integers(1, 9))
def test_every_rank_program_reads_only_what_it_holds(trainers, pservers, opt, decay,
                                                     slice_bytes, hidden):
    """For any parameter-server cluster: each rank's program reads only values it holds by
    then (fed data on trainers, state placed on it, or what an earlier op or transfer of
    its program wrote), every rank sees its transfers in the one global order, and the
    optimizer side runs on pservers only."""
    main, cluster = ps(f"trainer:{trainers},pserver:{pservers}", opt=opt, decay=decay,
                       hidden=hidden, slice_bytes=slice_bytes)
    placed = ex.plan_transfers(main)
    block = main.global_block()
    assert len(placed.transfers) == sum(len(e.transfers) for e in placed.edges)
    for rank in range(cluster.size):
        held = {"x", "y"} if cluster.role_of(rank) == "trainer" else set()
        for var in block.vars.values():
            if var.persistable and not slices_of(block, var.name) and (
                    var.place is None or rank in cluster.ranks(var.place)):
                held.add(var.name)
        ops = placed.for_rank(rank).global_block().ops
        for op in ops:
            missing = [n for n in op.input_names() if n and n not in held]
            assert not missing, (rank, str(op), missing)
            held.update(op.output_names())
            if cluster.role_of(rank) == "trainer":
                assert op.attrs.get("op_role") != "optimize" and op.type != "piecewise_decay"
        mine = [(op.attrs["var"], tuple(op.attrs["group"])) for op in ops if "group" in op.attrs]
        assert mine == [(t.var, t.group) for t in placed.transfers if rank in t.group]


def test_a_placed_program_runs_as_is_from_json():
    """Places and slices survive JSON; placing the loaded program by hand (it keeps every
    place) gives the same transfers and per-rank programs."""
    main, cluster = ps("trainer:2,pserver:2", opt=ex.Adam, slice_bytes=100)
    loaded = Program.from_json(main.to_json())
    ex.place(loaded, cluster=cluster)
    assert [str(t) for t in ex.plan_transfers(loaded).transfers] == \
        [str(t) for t in ex.plan_transfers(main).transfers]
    assert all(str(loaded.for_rank(r)) == str(main.for_rank(r)) for r in range(4))


@pytest.mark.parametrize("roles", ["trainer:2,pserver:0", "trainer:2", "trainer=3"])
def test_the_launcher_refuses_roles_that_do_not_fit(roles, capsys):
    from aluminum.run import main
    with pytest.raises(SystemExit) as exit_:
        main(["-n", "3", "--roles", roles, "script.py"])
    assert exit_.value.code == 2 and "--roles" in capsys.readouterr().err


def test_the_example_launches_with_roles_and_prints_each_roles_program():
    import subprocess
    import sys
    from pathlib import Path
    example = Path(__file__).resolve().parent.parent / "examples" / "fit_a_line_ps.py"
    run = subprocess.run([sys.executable, "-m", "aluminum.run", "-n", "3", "--roles",
                          "trainer:2,pserver:1", str(example)],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    for line in ("--- trainer program ---", "--- pserver program ---",
                 "send: reduce fc.w@GRAD [0, 1] -> fc.w@GRAD [2] x0.5",
                 "fc.w = sgd(Param=fc.w, Grad=fc.w@GRAD, LearningRate=learning_rate_4)",
                 "pserver rank 2: parameters equal one process's full-batch run: True",
                 "over 3 ranks (trainer:[0, 1], pserver:[2]): ok"):
        assert line in run.stdout, run.stdout
