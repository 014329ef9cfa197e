"""Output destinations: a prepared op moves each output with a destination there, whether
its kernel writes there or not; which gradients' producers get their bucket view as
destination (aluminum/executor/buckets.py); which gradients a fused bucket takes.
Training with them runs under MPI: tests/mpi/rank_executor_zero_copy.py."""
from types import SimpleNamespace

import numpy as np
import pytest

import aluminum.executor as ex
from aluminum.executor import layers
from aluminum.executor.buckets import gradient_destinations
from aluminum.executor.executor import PreparedOp
from aluminum.executor.ir import Operator
from aluminum.executor.ops.registry import Destinations
from aluminum.executor.ssa_graph import build_graph


@pytest.fixture
def copies(monkeypatch):
    """The number of ``np.copyto`` calls so far (the executor's copy into a destination)."""
    count = [0]
    real = np.copyto

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(np, "copyto", counted)
    return count


def _prepared(op, scope, out):
    return PreparedOp(op, scope, "cpu", "compute", None, Destinations(out))


def test_a_kernel_that_writes_into_its_destination_is_not_copied(copies):
    rng = np.random.default_rng(0)
    scope = ex.Scope({"x": rng.normal(size=(5, 3)), "w": rng.normal(size=(3, 2)),
                      "d": rng.normal(size=(5, 2))})
    op = Operator("matmul_grad", {"X": ["x"], "Y": ["w"], "Out@OUT": ["o"],
                                  "Out@GRAD": ["d"]}, {"X@GRAD": [""], "Y@GRAD": ["dw"]}, {})
    scope["o"] = scope["x"] @ scope["w"]
    destination = np.full((3, 2), np.nan)
    _prepared(op, scope, {"Y@GRAD": [destination]}).run()
    assert scope["dw"] is destination
    np.testing.assert_allclose(destination, scope["x"].T @ scope["d"], rtol=1e-14)
    assert copies[0] == 0


def test_a_kernel_that_ignores_its_destination_is_copied_in(copies):
    scope = ex.Scope({"x": np.array([-1.0, 2.0, -3.0])})
    destination = np.full(3, np.nan)
    _prepared(Operator("relu", {"X": ["x"]}, {"Out": ["y"]}, {}), scope,
              {"Out": [destination]}).run()
    assert scope["y"] is destination
    np.testing.assert_array_equal(destination, [0.0, 2.0, 0.0])
    assert copies[0] == 1


def test_a_value_that_does_not_fit_its_destination_is_kept_as_it_is(copies):
    scope = ex.Scope({"x": np.array([-1.0, 2.0, -3.0])})
    destination = np.full(4, np.nan)
    _prepared(Operator("relu", {"X": ["x"]}, {"Out": ["y"]}, {}), scope,
              {"Out": [destination]}).run()
    assert scope["y"] is not destination and np.isnan(destination).all()
    np.testing.assert_array_equal(scope["y"], [0.0, 2.0, 0.0])


class _Buckets:
    """Buckets without a communicator: plain memory and its views, no plan."""

    def get(self, key, shapes, dtype, root=None):
        sizes = [int(np.prod(shape)) for shape in shapes]
        memory = np.empty(sum(sizes), dtype)
        offsets = np.cumsum([0] + sizes)
        return SimpleNamespace(views=tuple(
            memory[offsets[i]:offsets[i + 1]].reshape(shape) for i, shape in enumerate(shapes)))


def _program(change=None, **options):
    """An MLP's data-parallel program (2 ranks); ``change(block)`` edits the trained
    program first."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", [4], "float64")
        y = layers.data("y", [1], "int64")
        hidden = layers.fc(x, 3, act="tanh", name="h")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(hidden, 2, name="o"), y))
        ex.SGD(0.1).minimize(loss)
    if change is not None:
        change(main.global_block())
    return ex.data_parallel_program(main, loss.name, 2, **options)


def _given(program) -> dict[str, str]:
    """gradient -> the type of the op given its bucket view as destination."""
    graph = build_graph(program)
    given = {}
    for index, out in gradient_destinations(graph, program.global_block(), _Buckets()).items():
        op = graph.ops[index].op
        for slot, views in out.slots.items():
            for name, view in zip(op.outputs[slot], views):
                if view is not None:
                    given[name] = op.type
    return given


GRADS = {"h.w@GRAD": "matmul_grad", "h.b@GRAD": "elementwise_add_grad",
         "o.w@GRAD": "matmul_grad", "o.b@GRAD": "elementwise_add_grad"}


@pytest.mark.parametrize("options", [{}, {"fuse_grad_size_mb": 1.0},
                                     {"reduce_strategy": "reduce"},
                                     {"places": 2}, {"overlap": False}])
def test_every_gradient_producer_gets_its_view(options):
    expected = {name: "sum" for name in GRADS} if options.get("places") else GRADS
    assert _given(_program(**options)) == expected


def _insert_after_producer(block, grad, op_type, inputs, outputs, attrs=None):
    producer = next(i for i, op in enumerate(block.ops) if grad in op.output_names())
    block.append_op(op_type, inputs, outputs, attrs or {})
    block.ops.insert(producer + 1, block.ops.pop())


def test_a_gradient_another_op_reads_first_gets_none():
    def peek(block):
        block.create_var("peek", (6,), "float64")
        _insert_after_producer(block, "o.w@GRAD", "reshape", {"X": ["o.w@GRAD"]},
                               {"Out": ["peek"]}, {"shape": (6,)})
    given = _given(_program(peek, overlap=False))
    assert "o.w@GRAD" not in given and len(given) == 3


def test_a_gradient_written_twice_gets_it_at_its_last_writer():
    def double(block):
        _insert_after_producer(block, "o.b@GRAD", "scale", {"X": ["o.b@GRAD"]},
                               {"Out": ["o.b@GRAD"]}, {"scale": 2.0})
    assert _given(_program(double)) == {**GRADS, "o.b@GRAD": "scale"}


def test_a_producer_reading_last_steps_reduced_gradient_gets_none():
    """Accumulating into the previous step's gradient: the ``sum`` reads, as the run
    starts, what the bucket held (its own destination)."""
    def accumulate(block):
        producer = next(op for op in block.ops if "o.w@GRAD" in op.output_names())
        producer.outputs["Y@GRAD"] = ["o.w@GRAD@new"]
        block.create_var("o.w@GRAD@new", (3, 2), "float64")
        _insert_after_producer(block, "o.w@GRAD@new", "sum",
                               {"X": ["o.w@GRAD", "o.w@GRAD@new"]}, {"Out": ["o.w@GRAD"]})
    given = _given(_program(accumulate))
    assert "o.w@GRAD" not in given and len(given) == 3


def _reductions(program) -> list[tuple[str, list[str], int]]:
    """(op type, gradients, position) of each allreduce op, in program order."""
    return [(op.type, op.output_names(), index)
            for index, op in enumerate(program.global_block().ops)
            if op.type in ("allreduce", "fused_allreduce")]


def test_fused_buckets_close_after_their_last_gradient_and_skip_one_read_early():
    """With ``fuse_grad_size_mb`` the gradients share one bucket after the last is finished;
    a gradient another op reads in the backward pass keeps its own allreduce before that
    op, so the reader sees the same (reduced) gradient with and without fusion."""
    program = _program(fuse_grad_size_mb=1.0)
    [(kind, names, index)] = _reductions(program)
    assert kind == "fused_allreduce" and sorted(names) == sorted(GRADS)
    assert index == 1 + max(i for i, op in enumerate(program.global_block().ops)
                            if op.type != "fused_allreduce" and set(op.output_names()) & set(GRADS))

    def peek(block):
        block.create_var("peek", (6,), "float64")
        _insert_after_producer(block, "o.w@GRAD", "reshape", {"X": ["o.w@GRAD"]},
                               {"Out": ["peek"]}, {"shape": (6,)})
    for options in ({}, {"fuse_grad_size_mb": 1.0}):
        program = _program(peek, **options)
        reader = next(i for i, op in enumerate(program.global_block().ops)
                      if op.type == "reshape")
        own = [index for _, names, index in _reductions(program) if names == ["o.w@GRAD"]]
        assert len(own) == 1 and own[0] < reader, options
    fused = [names for kind, names, _ in _reductions(program) if kind == "fused_allreduce"]
    assert [sorted(names) for names in fused] == [sorted(set(GRADS) - {"o.w@GRAD"})]


def test_a_kind_that_binds_its_op_runs_bound_and_its_failure_names_the_op():
    """``OpKind.bind``: a prepared op runs what its kind bound (not ``compute``) where no
    destinations are asked for, and what that raises is named as a kernel's failure."""
    from aluminum.executor.ops import registry
    calls = []

    @registry.register      # (a type of its own: registered for the rest of the session)
    class Doubled(registry.OpKind):
        type = "test_bound_double"

        def compute(self, ins, attrs, ctx, out):
            calls.append("compute")
            return {"Out": [ins["X"][0] * 2]}

        def bind(self, op, scope, ctx):
            def run():
                calls.append("bound")
                if scope["x"].size == 0:
                    raise ValueError("nothing to double")
                scope[op.outputs["Out"][0]] = scope[op.inputs["X"][0]] * 2
            return run

    op = Operator(Doubled.type, {"X": ["x"]}, {"Out": ["y"]}, {})
    scope = ex.Scope({"x": np.arange(3.0)})
    PreparedOp(op, scope, "cpu", "compute", None).run()
    np.testing.assert_array_equal(scope["y"], [0.0, 2.0, 4.0])
    assert calls == ["bound"]
    _prepared(op, scope, {"Out": [np.empty(3)]}).run()    # destinations: compute's path
    assert calls == ["bound", "compute"]
    scope["x"] = np.empty(0)
    with pytest.raises(ex.ExecutionError, match="op test_bound_double on cpu failed: "
                                                "ValueError: nothing to double"):
        PreparedOp(op, scope, "cpu", "compute", None).run()
