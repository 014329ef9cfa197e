"""Sharded operators and SEMI_AUTO_PARALLEL (issue 28 item 4).

The multi-rank checks (training equal to numpy on 2 and 4 ranks, Megatron's collective
counts, hybrid 2x2, bad strategies on every rank) are in tests/mpi/sharding_ranks.py,
launched here once per size; below, what one process can check: strategies against their
expected form, the layouts the pass derives, and the pass's program through JSON.
"""
import types

import numpy as np
import pytest

import aluminum.executor as ex
from aluminum.executor import layers
from aluminum.executor.sharding import from_strategy, fuse_gradient_sums
from aluminum.executor.sharding.rules import signature
from test_multirank import run_ranks


@pytest.mark.parametrize("ranks", [2, 4])
def test_training_on_ranks(ranks, tmp_path):
    run_ranks("sharding_ranks.py", ranks, tmp_path)


def comm(size, rank=0):
    return types.SimpleNamespace(size=size, rank=rank)


def fc_program(shard, rows=8, width=6, size=4, act=None):
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", (rows, width), "float64", append_batch_size=False)
        out = layers.mean(layers.fc(x, size, act=act, shard=shard))
        ex.SGD(0.1).minimize(out)
    return main, out


def placements(program, name):
    layout = program.global_block().var(name).layout
    return [str(p) for p in layout.placements], list(layout.mesh.shape)


@pytest.mark.parametrize("shard, ranks, weight, x", [
    (((2, 1), (1, 1)), 2, (["R"], [2]), (["S(0)"], [2])),            # batch
    (((1, 1), (1, 2)), 2, (["S(1)"], [2]), (["R"], [2])),            # column
    (((1, 2), (2, 1)), 2, (["S(0)"], [2]), (["S(1)"], [2])),         # inner (row)
    (((2, 1), (1, 2)), 4, (["R", "S(1)"], [2, 2]), (["S(0)", "R"], [2, 2])),
    (((2, 1), (1, 1)), 4, (["R", "R"], [2, 2]), (["S(0)", "R"], [2, 2])),   # repeated last
])
def test_a_matmul_strategy_lays_out_its_inputs_as_mindspore_does(shard, ranks, weight, x):
    main, out = fc_program(shard)
    program = ex.shard_program(main, comm(ranks), out.name)
    assert placements(program, "fc_0.w") == weight
    assert placements(program, "x") == x


def test_an_inner_dimension_split_gives_partial_summed_before_the_bias():
    main, out = fc_program(((1, 2), (2, 1)))
    program = ex.shard_program(main, comm(2), out.name)
    ops = program.global_block().ops
    matmul = next(op for op in ops if op.type == "matmul")
    assert placements(program, matmul.outputs["Out"][0]) == (["P"], [2])
    after = ops[ops.index(matmul) + 1]
    assert after.type == "redistribute" and after.attrs["dst"]["placements"] == ["R"]


def _made_by(program, names):
    """The ops that write ``names``, with their input's and output's placements."""
    block = program.global_block()
    return [(op.type, [str(p) for p in block.var(op.input_names()[0]).layout.placements],
             [str(p) for p in block.var(op.output_names()[0]).layout.placements])
            for op in block.ops if op.output_names() and op.output_names()[0] in names]


def test_a_batch_split_weight_gradient_is_summed_back_to_the_weight_layout():
    """Data parallelism falls out: the weight gradient is Partial over the batch split and
    an allreduce over every rank makes it the weight's layout again -- the data-parallel
    pass's op, not a redistribution."""
    main, out = fc_program(((2, 1), (1, 1)))
    program = ex.shard_program(main, comm(2), out.name)
    assert _made_by(program, ("fc_0.w@GRAD", "fc_0.b@GRAD")) == \
        [("allreduce", ["P"], ["R"])] * 2


def test_fused_gradient_sums_are_one_op_after_the_last_gradient_they_sum():
    """Data parallelism's four parameter-gradient sums become one fused allreduce, placed
    after the op computing the last of them and before the optimizer reads any."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", (8, 6), "float64", append_batch_size=False)
        h = layers.fc(layers.fc(x, 5, act="tanh", name="a", shard=((2, 1), (1, 1))), 3,
                      name="b")
        out = layers.mean(h)
        ex.SGD(0.1).minimize(out)
    program = fuse_gradient_sums(ex.shard_program(main, comm(2), out.name), 32.0)
    ops = program.global_block().ops
    sums = [i for i, op in enumerate(ops) if op.type in ("allreduce", "fused_allreduce")
            and any(name.endswith(".w@GRAD") or name.endswith(".b@GRAD")
                    for name in op.output_names())]
    assert len(sums) == 1 and ops[sums[0]].type == "fused_allreduce", \
        [ops[i].type for i in sums]
    fused = ops[sums[0]]
    params = {"a.w", "a.b", "b.w", "b.b"}
    assert sorted(fused.output_names()) == sorted(p + "@GRAD" for p in params)
    summands = set(fused.input_names())
    writers = [i for i, op in enumerate(ops) if set(op.output_names()) & summands]
    readers = [i for i, op in enumerate(ops) if set(op.input_names()) & params]
    assert max(writers) < sums[0] < min(i for i in readers if ops[i].type == "sgd")


@pytest.mark.parametrize("shard, name, placements", [
    (((2, 1), (1, 2)), "fc_0.w@GRAD", (["P", "S(1)"], ["R", "S(1)"])),   # stays split
    (((2, 2), (2, 1)), "fc_0.b@GRAD", (["P", "R"], ["R", "R"])),         # whole, one axis
])
def test_a_sum_along_one_mesh_dimension_stays_a_redistribution(shard, name, placements):
    """On a 2 x 2 mesh with the batch split in two, a gradient summed along the batch
    dimension's lines only (into a split weight, or into a whole bias the other dimension
    already holds alike) takes the planner's route, not an allreduce over every rank."""
    main, out = fc_program(shard)
    program = ex.shard_program(main, comm(4), out.name)
    assert _made_by(program, (name,)) == [("redistribute", *placements)]


@pytest.mark.parametrize("shard, message", [
    (((3, 1), (1, 1)), "does not divide the mesh: 3 parts on 4 ranks"),
    (((2, 2), (2, 2)), "needs 8 ranks: a mesh larger than the communicator"),
    (((2, 1), (2, 1)), "splits dimension 'k' in 1 and in 2 parts"),
    (((1, 1),), "does not have one entry per dimension of each input"),
])
def test_a_bad_strategy_names_the_op_the_strategy_and_the_expected_form(shard, message):
    main, out = fc_program(shard)
    with pytest.raises(ex.ProgramError) as error:
        ex.shard_program(main, comm(4), out.name)
    text = str(error.value)
    assert text.startswith("op matmul") and str(shard) in text and message in text, text
    assert "expected ((m, k), (k, n))" in text, text


def test_a_strategy_needing_three_mesh_dimensions_is_refused():
    main, out = fc_program(((2, 2), (2, 2)))
    with pytest.raises(ex.ProgramError, match="3-D device matrix"):
        ex.shard_program(main, comm(8), out.name)


def test_a_strategy_on_an_op_that_cannot_be_sharded_is_refused():
    ex.reset_unique_names()
    main = ex.Program()
    with ex.program_guard(main, ex.Program()):
        x = layers.data("x", (4, 6), "float64", append_batch_size=False)
        y = layers.softmax(x)
        main.global_block().ops[-1].shard(((2, 1),))
        out = layers.mean(y)
    with pytest.raises(ex.ProgramError, match="op softmax .* cannot be sharded"):
        ex.shard_program(main, comm(2), out.name)


def test_a_batch_dimension_is_refused_naming_the_variable():
    ex.reset_unique_names()
    main = ex.Program()
    with ex.program_guard(main, ex.Program()):
        x = layers.data("x", (6,), "float64")
        out = layers.mean(layers.fc(x, 4, shard=((2, 1), (1, 1))))
    with pytest.raises(ex.ProgramError, match="'x' has shape \\[-1, 6\\].*whole shapes"):
        ex.shard_program(main, comm(2), out.name)


def test_elementwise_broadcasting_signature():
    ex.reset_unique_names()
    main = ex.Program()
    with ex.program_guard(main, ex.Program()):
        x = layers.data("x", (4, 1, 6), "float64", append_batch_size=False)
        b = layers.data("b", (3, 6), "float64", append_batch_size=False)
        layers.elementwise_add(x, b)
    op = main.global_block().ops[-1]
    sig = signature(op, main.global_block())
    assert sig.inputs == {"X": ["aBc"], "Y": ["bc"]} and sig.outputs == {"Out": ["abc"]}
    with pytest.raises(ex.ProgramError, match="broadcast"):
        from_strategy("op elementwise_add", sig, ((1, 2, 1), (1, 1)), 2)


@pytest.mark.parametrize("x_shape, out_shape, shard, kept", [
    ((8, 3, 2), (8, 6), ((2, 1, 1),), ["S(0)"]),      # a leading dimension kept
    ((4, 6), (8, 3), ((2, 1),), ["S(0)"]),            # rows split into whole output rows
    ((4, 6), (24,), ((2, 1),), ["S(0)"]),             # flattened
])
def test_a_reshape_keeps_a_split_whose_parts_stay_whole_rows(x_shape, out_shape, shard, kept):
    ex.reset_unique_names()
    main = ex.Program()
    with ex.program_guard(main, ex.Program()):
        x = layers.data("x", x_shape, "float64", append_batch_size=False)
        out = layers.reshape(x, out_shape, shard=shard)
    program = ex.shard_program(main, comm(2))
    assert placements(program, out.name)[0] == kept
    assert program.global_block().ops[-1].type == "sharded_reshape"


def test_a_reshape_split_that_would_cut_output_rows_is_refused():
    ex.reset_unique_names()
    main = ex.Program()
    with ex.program_guard(main, ex.Program()):
        x = layers.data("x", (3, 4), "float64", append_batch_size=False)
        layers.reshape(x, (2, 6), shard=((2, 1),))
    with pytest.raises(ex.ProgramError, match="op reshape .*not parts of \\[2, 6\\]"):
        ex.shard_program(main, comm(2))


def test_strategies_and_layouts_survive_json():
    main, out = fc_program(((2, 1), (1, 2)))
    loaded = ex.Program.from_json(main.to_json())
    assert loaded.global_block().ops[0].attrs["shard"] == ((2, 1), (1, 2)) or \
        [list(s) for s in loaded.global_block().ops[0].attrs["shard"]] == [[2, 1], [1, 2]]
    program = ex.shard_program(loaded, comm(4), out.name)
    again = ex.Program.from_json(program.to_json())
    assert str(again) == str(program)


def test_one_rank_runs_the_sharded_program_as_the_plain_one():
    """On one rank every layout is whole: the sequential Executor runs the pass's program
    and gives the plain program's loss (float64, numpy reference)."""
    import aluminum as al
    with al.MPICommunicator() as one:
        main, out = fc_program(((1, 1), (1, 1)), act="tanh")
        program = ex.shard_program(main, one, out.name)
        rng = np.random.default_rng(0)
        x, w = rng.normal(size=(8, 6)), rng.normal(size=(6, 4))
        scope = ex.Scope()
        scope["fc_0.w"], scope["fc_0.b"] = w, np.zeros(4)
        scope[program.global_block().ops[-1].inputs["LearningRate"][0]] = np.array([0.1])
        loss, = ex.Executor().run(program, feed={"x": x}, fetch_list=[out.name], scope=scope)
    np.testing.assert_allclose(loss, np.tanh(x @ w).mean(), rtol=1e-12)
