"""The executor layer end to end: out-of-order runs equal the sequential reference bit for
bit, JSON round trips, autodiff against finite differences, the SSA graph, and errors."""
import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fit_a_line, mnist_mlp = _example("fit_a_line"), _example("mnist_mlp")


def _train(build, feed, fetch, steps, threads=None, before_op=None, program_json=None,
           sync="event"):
    """Parameters and fetched values after ``steps`` runs (sequential when threads is
    None)."""
    main, startup, loss, *_ = build()
    if program_json is not None:
        main = ex.Program.from_json(program_json(main))
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    if threads is None:
        runner = ex.Executor()
        run = lambda: runner.run(main, feed, fetch(loss), scope)   # noqa: E731
    else:
        strategy = ex.ExecutionStrategy(num_threads=threads, sync=sync, before_op=before_op)
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                     exec_strategy=strategy)
        run = lambda: runner.run(fetch(loss), feed)   # noqa: E731
    values = [run() for _ in range(steps)]
    params = {n: scope[n].copy() for n, v in main.global_block().vars.items()
              if v.persistable}
    return params, values


def _mnist(dtype):
    images, labels = mnist_mlp.dataset(64, dtype)
    return (lambda: mnist_mlp.build(dtype)), {"image": images, "label": labels}


def _line(dtype):
    features, prices = fit_a_line.dataset(64, dtype)
    return (lambda: fit_a_line.build(dtype)), {"x": features, "y": prices}


def _assert_identical(a, b):
    params_a, values_a = a
    params_b, values_b = b
    assert params_a.keys() == params_b.keys()
    for name in params_a:
        np.testing.assert_array_equal(params_a[name], params_b[name], err_msg=name)
    for x, y in zip(values_a, values_b):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("model", [_mnist, _line], ids=["mnist_mlp", "fit_a_line"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("sync", ["event", "wait"])
def test_parallel_executor_equals_sequential_bit_for_bit(model, dtype, threads, sync):
    build, feed = model(dtype)
    fetch = lambda loss: [loss]   # noqa: E731
    reference = _train(build, feed, fetch, 4)
    _assert_identical(reference, _train(build, feed, fetch, 4, threads, sync=sync))


@settings(max_examples=8, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 2 ** 16), threads=st.sampled_from([2, 4]),
       sync=st.sampled_from(["event", "wait"]))
def test_random_thread_timing_never_changes_a_result(seed, threads, sync):
    build, feed = _mnist("float32")
    rng = np.random.default_rng(seed)
    delays = iter(rng.exponential(2e-4, 100000))

    def jitter(handle):
        time.sleep(next(delays))
    fetch = lambda loss: [loss]   # noqa: E731
    _assert_identical(_train(build, feed, fetch, 2),
                      _train(build, feed, fetch, 2, threads, before_op=jitter, sync=sync))


def test_json_round_trip_is_lossless_and_trains_identically():
    build, feed = _mnist("float64")
    main = build()[0]
    text = main.to_json()
    assert ex.Program.from_json(text).to_json() == text
    assert str(ex.Program.from_json(text)) == str(main)
    fetch = lambda loss: [loss]   # noqa: E731
    _assert_identical(_train(build, feed, fetch, 3),
                      _train(build, feed, fetch, 3, 2, program_json=lambda p: p.to_json()))


def test_place_survives_the_round_trip():
    program = ex.Program()
    block = program.global_block()
    var = block.create_var("x", (2,), place=ex.PlaceGroup(("trainer",), ("n0",), ("cpu:0",)))
    block.create_var("y", (2,))
    op = block.append_op("relu", {"X": ["x"]}, {"Out": ["y"]})
    op.place = var.place
    loaded = ex.Program.from_json(program.to_json())
    assert loaded.global_block().var("x").place == var.place
    assert loaded.global_block().ops[0].place == var.place
    assert "relu" in program.to_dot()


def test_autodiff_matches_finite_differences_of_the_whole_program():
    """append_backward's gradients (with accumulation: x feeds two ops) vs central
    differences of the program's loss, float64."""
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", [3], "float64")
        hidden = layers.fc(x, 4, act="tanh", dtype="float64", name="h")
        both = layers.elementwise_add(layers.fc(hidden, 2, dtype="float64", name="a"),
                                      layers.fc(hidden, 2, act="sigmoid", dtype="float64",
                                                name="b"))
        loss = layers.mean(layers.elementwise_mul(both, both))
        pairs = ex.append_backward(loss)
    assert any(op.type == "sum" for op in main.global_block().ops)   # hidden@GRAD summed
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    feed = {"x": np.random.default_rng(0).normal(size=(5, 3))}
    grads = ex.Executor().run(main, feed, [g for _, g in pairs], scope)
    forward = main.clone()
    forward.global_block().ops = [op for op in forward.global_block().ops
                                  if "op_role" not in op.attrs]
    for (param, _), analytic in zip(pairs, grads):
        value = scope[param.name]
        numeric = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            saved = value[index]
            losses = []
            for step in (1e-6, -1e-6):
                value[index] = saved + step
                losses.append(ex.Executor().run(forward, feed, [loss.name], scope)[0][0])
            value[index] = saved
            numeric[index] = (losses[0] - losses[1]) / 2e-6
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9,
                                   err_msg=param.name)


def test_ssa_graph_versions_and_dummies():
    main = mnist_mlp.build()[0]
    graph = ex.build_graph(main)
    versions = graph.versions["fc1.w"]
    assert [v.version for v in versions] == [0, 1]       # read, then written by momentum
    writer = versions[1].generated_op
    assert writer.op.type == "momentum"
    # write after read: every reader of version 0 runs before the update
    for reader in versions[0].pending_ops:
        if reader is not writer:
            assert any(v.dummy and v.generated_op is reader for v in writer.inputs)
    assert all(handle.outputs for handle in graph.ops)
    assert "dummy@" in graph.to_dot()


def test_cycle_is_reported():
    program = ex.Program()
    block = program.global_block()
    for name in "ab":
        block.create_var(name, (1,))
    block.append_op("relu", {"X": ["a"]}, {"Out": ["b"]})
    graph = ex.build_graph(program)
    graph.successors[0].append(0)
    graph.dependency_counts[0] += 1
    with pytest.raises(ex.ProgramError, match="cycle"):
        graph.validate()


def test_bad_programs_fail_before_anything_runs():
    main, startup, loss = fit_a_line.build()
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    before = {k: v.copy() for k, v in scope.items()}
    good = fit_a_line.dataset(8)
    for runner in (lambda f, l: ex.Executor().run(main, f, l, scope),
                   lambda f, l: ex.ParallelExecutor(main, scope=scope).run(l, f)):
        with pytest.raises(ex.ProgramError, match="feed 'x': expected shape"):
            runner({"x": good[0][:, :5], "y": good[1]}, [loss])
        with pytest.raises(ex.ProgramError, match="feed 'x': expected dtype"):
            runner({"x": good[0].astype(np.float64), "y": good[1]}, [loss])
        with pytest.raises(ex.ProgramError, match="fetch 'nope'"):
            runner({"x": good[0], "y": good[1]}, ["nope"])
        with pytest.raises(ex.ProgramError, match="reads variable 'y'"):
            runner({"x": good[0]}, [loss])
        for name, value in before.items():
            np.testing.assert_array_equal(scope[name], value)
    assert issubclass(ex.ProgramError, al.AluminumError)


def test_shape_mismatch_and_unknown_op_at_build_time():
    program = ex.Program()
    with ex.program_guard(program, ex.Program()):
        x = layers.data("x", [3])
        w = layers.create_parameter((4, 2), name="w")
        with pytest.raises(ex.ProgramError, match="matmul.*cannot be multiplied"):
            layers.matmul(x, w)
        with pytest.raises(ex.ProgramError, match="no such op type"):
            program.global_block().append_op("frobnicate", {"X": ["x"]}, {})


def test_failing_op_names_itself_and_the_run_drains():
    program = ex.Program()
    block = program.global_block()
    for name in ("ids", "w", "out"):
        block.create_var(name, (2, 1) if name == "ids" else (3, 2), "int64" if name == "ids"
                         else "float32")
    block.append_op("lookup_table", {"W": ["w"], "Ids": ["ids"]}, {"Out": ["out"]})
    scope = ex.Scope(w=np.zeros((3, 2), np.float32))
    for threads in (1, 2):
        runner = ex.ParallelExecutor(program, scope=scope,
                                     exec_strategy=ex.ExecutionStrategy(num_threads=threads))
        with pytest.raises(ex.ExecutionError, match="op lookup_table on cpu failed"):
            runner.run(["out"], {"ids": np.array([[0], [7]])})   # 7 is out of range


TIMELINE_SCRIPT = """
import json, sys
import numpy as np
import aluminum as al
import aluminum.executor as ex

program = ex.Program()
block = program.global_block()
scope = ex.Scope()
for branch in "ab":
    block.create_var(branch + "0", (256, 256), "float64")
    scope[branch + "0"] = np.eye(256)
    for i in range(6):
        block.create_var(f"{branch}{i + 1}", (256, 256), "float64")
        block.append_op("matmul", {"X": [f"{branch}{i}"], "Y": [branch + "0"]},
                        {"Out": [f"{branch}{i + 1}"]})
runner = ex.ParallelExecutor(program, scope=scope,
                             exec_strategy=ex.ExecutionStrategy(num_threads=2))
for _ in range(3):
    runner.run(["a6"], {})
print(al.trace.write())
"""


def test_timeline_is_valid_chrome_json_and_shows_both_threads(tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, AL_TRACE=str(tmp_path / "timeline.json"))
    env.pop("OMPI_COMM_WORLD_RANK", None)
    run = subprocess.run([sys.executable, "-c", TIMELINE_SCRIPT], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    events = json.loads(Path(run.stdout.strip().splitlines()[-1]).read_text())
    spans = [e for e in events if e.get("cat") == "executor"]
    assert len(spans) == 39 and all(e["ph"] == "X" and e["dur"] >= 0 for e in spans)
    assert {e["name"] for e in spans} == {"matmul", "fetch"}
    assert all({"place", "stream", "thread"} <= set(e["args"]) for e in spans)
    assert {e["args"]["stream"] for e in spans if e["name"] == "matmul"} == {"compute"}
    assert {e["args"]["stream"] for e in spans if e["name"] == "fetch"} == {"fetch"}
    assert len({e["tid"] for e in spans if e["name"] == "matmul"}) == 2   # both workers


def test_a_loss_with_a_batch_dimension_is_rejected_at_build_time():
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", [3], "float64")
        per_sample = layers.fc(x, 1)                      # shape [-1, 1]
        with pytest.raises(ex.ProgramError, match="one-element"):
            ex.append_backward(per_sample)


def test_parameters_take_the_input_dtype_and_mixed_dtypes_are_rejected():
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", [3], "float64")
        layers.fc(x, 2)
        assert {v.dtype for v in main.global_block().vars.values()} == {"float64"}
        w32 = layers.create_parameter((3, 2), "float32", name="w32")
        with pytest.raises(ex.ProgramError, match="float64 but Y w32 is float32"):
            layers.matmul(x, w32)
