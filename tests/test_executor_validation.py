"""Hostile or mistaken programs and feeds: every one is a ProgramError (before anything
runs, the scope untouched) or an ExecutionError naming the op, never a raw Python
exception; size limits stay fast; the opt-in NaN/Inf check names the first bad op."""
import json
import re
import time

import numpy as np
import pytest

import aluminum.executor as ex
from aluminum.executor import layers

PLACES = ["cpu:0", "cpu:1"]


def _limit(name):
    """A documented limit of program_check (imported when a test needs it, so the other
    tests also run, and fail, against code that has no such module)."""
    from aluminum.executor import program_check
    return getattr(program_check, name)


def _relu_program():
    """x [-1, 3] -> relu -> y: the smallest valid program."""
    program = ex.Program()
    block = program.global_block()
    block.create_var("x", (-1, 3), stop_gradient=True)
    block.create_var("y", (-1, 3))
    block.append_op("relu", {"X": ["x"]}, {"Out": ["y"]})
    return program


def _matmul_program():
    """out = x [-1, 3] @ w [3, 2]."""
    program = ex.Program()
    block = program.global_block()
    block.create_var("x", (-1, 3), stop_gradient=True)
    block.create_var("w", (3, 2), persistable=True)
    block.create_var("out", ())
    block.append_op("matmul", {"X": ["x"], "Y": ["w"]}, {"Out": ["out"]})
    return program


def _edited(program, edit):
    """``program``'s JSON after ``edit(data)`` changed its dict."""
    data = json.loads(program.to_json())
    edit(data)
    return json.dumps(data)


def _fit_a_line():
    """(main, startup, loss, scope with initialized parameters, feed) of a linear
    regression trained with SGD."""
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 3
    with ex.program_guard(main, startup):
        x = layers.data("x", [13])
        y = layers.data("y", [1])
        loss = layers.mean(layers.square_error_cost(layers.fc(x, 1, name="fc"), y))
        ex.SGD(learning_rate=0.05).minimize(loss)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    rng = np.random.default_rng(0)
    feed = {"x": rng.normal(size=(8, 13)).astype(np.float32),
            "y": rng.normal(size=(8, 1)).astype(np.float32)}
    return main, startup, loss, scope, feed


def _snapshot(scope):
    return {name: np.array(value, copy=True) for name, value in scope.items()}


def _assert_untouched(scope, before):
    assert scope.keys() == before.keys()
    for name, value in before.items():
        np.testing.assert_array_equal(scope[name], value, err_msg=name)


def _runners(program, scope, loss_name=None):
    """Run ``program`` once with each executor: (name, run(feed, fetch_list))."""
    def sequential(feed, fetch):
        return ex.Executor().run(program, feed, fetch, scope)

    def parallel(feed, fetch):
        return ex.ParallelExecutor(program, loss_name=loss_name, scope=scope).run(fetch, feed)

    return [("Executor", sequential), ("ParallelExecutor", parallel)]


# -- Program.from_json: text that is not a program ----------------------------------------

def _without(path, field):
    def edit(data):
        target = data
        for key in path:
            target = target[key]
        del target[field]
    return edit


def _set(path, field, value):
    def edit(data):
        target = data
        for key in path:
            target = target[key]
        target[field] = value
    return edit


VAR0, OP0 = ("blocks", 0, "vars", 0), ("blocks", 0, "ops", 0)

BAD_TEXTS = {
    "not json": ("not json", r"program: expected JSON text, got text that does not parse: "
                             r"Expecting value: line 1 column 1"),
    "a list": ("[]", r"program: expected a JSON object, got list"),
    "no random_seed": ('{"format": "aluminum-program/1"}',
                       r"program: missing field 'random_seed' \(expected the fields format, "
                       r"random_seed, blocks\)"),
    "format": ('{"format": "aluminum-program/0", "random_seed": 0, "blocks": []}',
               r"program\.format: expected 'aluminum-program/1', got 'aluminum-program/0'"),
    "not text": (None, r"program: expected JSON text \(str or bytes\), got NoneType"),
}

BAD_EDITS = {
    "var extra field": (_set(VAR0, "colour", "red"),
                        r"blocks\[0\]\.vars\[0\]: unknown field 'colour' \(expected the fields "
                        r"name, shape, dtype, persistable, stop_gradient, place, "
                        r"is_parameter, layout\)"),
    "var without name": (_without(VAR0, "name"),
                         r"blocks\[0\]\.vars\[0\]: missing field 'name'"),
    "op without place": (_without(OP0, "place"),
                         r"blocks\[0\]\.ops\[0\]: missing field 'place'"),
    "ops a dict": (_set(("blocks", 0), "ops", {}),
                   r"blocks\[0\]\.ops: expected a list, got dict"),
    "dtype float65": (_set(VAR0, "dtype", "float65"),
                      r"blocks\[0\]\.vars\[0\]\.dtype: expected a numeric numpy dtype name "
                      r"\(such as 'float32'\), got 'float65'"),
    "shape of strings": (_set(VAR0, "shape", ["a", 3]),
                         r"blocks\[0\]\.vars\[0\]\.shape: expected a list of integers >= -1, "
                         r"got \['a', 3\]"),
    "seed a string": (_set((), "random_seed", "7"),
                      r"program\.random_seed: expected an integer, got '7'"),
    "inputs of numbers": (_set(OP0, "inputs", {"X": [1]}),
                          r"blocks\[0\]\.ops\[0\]\.inputs: expected an object of slot -> "
                          r"list of variable names, got \{'X': \[1\]\}"),
    "two vars, one name": (lambda data: data["blocks"][0]["vars"].append(
                               dict(data["blocks"][0]["vars"][0])),
                           r"blocks\[0\]\.vars\[2\]\.name: 'x' is declared twice"),
    "place not a group": (_set(OP0, "place", "cpu:0"),
                          r"blocks\[0\]\.ops\[0\]\.place: expected null or an object with "
                          r"roles, nodes, places \(lists of strings\), got 'cpu:0'"),
}


@pytest.mark.parametrize("case", sorted(BAD_TEXTS))
def test_text_that_is_no_program_is_a_program_error_naming_the_field(case):
    text, message = BAD_TEXTS[case]
    with pytest.raises(ex.ProgramError, match=message):
        ex.Program.from_json(text)


@pytest.mark.parametrize("case", sorted(BAD_EDITS))
def test_a_malformed_field_is_a_program_error_naming_it(case):
    edit, message = BAD_EDITS[case]
    text = _edited(_relu_program(), edit)
    with pytest.raises(ex.ProgramError, match=message):
        ex.Program.from_json(text)


def test_a_bad_dtype_in_a_built_program_fails_before_anything_runs():
    """float65 was a raw TypeError from numpy at the first run, under both executors."""
    program = _relu_program()
    program.global_block().create_var("z", (2,), "float65")
    scope = ex.Scope()
    for name, run in _runners(program, scope):
        with pytest.raises(ex.ProgramError, match=r"vars\['z'\]\.dtype: expected a numeric "
                                                  r"numpy dtype name .*got 'float65'"):
            run({"x": np.ones((2, 3), np.float32)}, ["y"])
        assert not scope, name


# -- a loaded program is checked as a built one is ----------------------------------------

def test_declared_shapes_that_disagree_fail_at_load_not_in_the_kernel():
    text = _edited(_matmul_program(), lambda d: d["blocks"][0]["vars"][1].update(shape=[5, 2]))
    with pytest.raises(ex.ProgramError, match=r"blocks\[0\]\.ops\[0\]: op matmul: X x \[-1, 3\] "
                                              r"and Y w \[5, 2\] "
                                              r"cannot be multiplied"):
        ex.Program.from_json(text)


def test_a_declared_output_shape_that_inference_contradicts_fails_at_load():
    text = _edited(_matmul_program(), lambda d: d["blocks"][0]["vars"][2].update(shape=[-1, 7]))
    with pytest.raises(ex.ProgramError, match=r"blocks\[0\]\.ops\[0\]: op matmul: output 'out' "
                                              r"is declared float32 \[-1, 7\], shape inference "
                                              r"gives float32 \[-1, 2\]"):
        ex.Program.from_json(text)


def test_an_undeclared_intermediate_variable_fails_at_load():
    def drop_out(data):
        data["blocks"][0]["vars"] = [v for v in data["blocks"][0]["vars"] if v["name"] != "out"]
    with pytest.raises(ex.ProgramError, match=r"blocks\[0\]\.ops\[0\]: op matmul: output "
                                              r"variable 'out' is not declared"):
        ex.Program.from_json(_edited(_matmul_program(), drop_out))


def test_an_op_missing_a_slot_fails_at_load():
    text = _edited(_matmul_program(), lambda d: d["blocks"][0]["ops"][0]["inputs"].pop("Y"))
    with pytest.raises(ex.ProgramError, match=r"blocks\[0\]\.ops\[0\]: op matmul: shape "
                                              r"inference failed: KeyError: 'Y'"):
        ex.Program.from_json(text)


def test_every_valid_program_still_loads_and_round_trips():
    main, startup, *_ = _fit_a_line()
    for program in (main, startup, _relu_program(), _matmul_program()):
        text = program.to_json()
        assert ex.Program.from_json(text).to_json() == text


# -- the whole program is checked before the first op runs --------------------------------

def test_an_unknown_op_after_the_updates_fails_before_any_parameter_changes():
    main, _, loss, scope, feed = _fit_a_line()
    main.global_block().ops.append(ex.Operator("frobnicate", {"X": [loss.name]}, {}))
    before = _snapshot(scope)
    for name, run in _runners(main, scope, loss.name):
        with pytest.raises(ex.ProgramError, match=r"op 'frobnicate': no such op type"):
            run(feed, [loss])
        _assert_untouched(scope, before)


def test_a_program_edited_after_a_good_run_is_checked_again():
    main, _, loss, scope, feed = _fit_a_line()
    runner = ex.Executor()
    runner.run(main, feed, [loss], scope)
    block = main.global_block()
    block.ops.append(ex.Operator("frobnicate", {"X": [loss.name]}, {}))
    before = _snapshot(scope)
    with pytest.raises(ex.ProgramError, match=r"op 'frobnicate': no such op type"):
        runner.run(main, feed, [loss], scope)
    _assert_untouched(scope, before)
    block.ops[-1] = ex.Operator("relu", {"X": [loss.name]}, {"Out": ["ghost"]})
    with pytest.raises(ex.ProgramError, match=r"output variable 'ghost' is not declared"):
        runner.run(main, feed, [loss], scope)
    _assert_untouched(scope, before)
    block.ops.pop()
    runner.run(main, feed, [loss], scope)


def test_a_hand_built_op_on_an_undeclared_variable_fails_before_anything_runs():
    main, _, loss, scope, feed = _fit_a_line()
    main.global_block().ops.append(ex.Operator("relu", {"X": [loss.name]}, {"Out": ["ghost"]}))
    before = _snapshot(scope)
    for name, run in _runners(main, scope, loss.name):
        with pytest.raises(ex.ProgramError, match=r"blocks\[0\]\.ops\[\d+\]: op relu: output "
                                                  r"variable 'ghost' is not declared"):
            run(feed, [loss])
        _assert_untouched(scope, before)


# -- size limits ------------------------------------------------------------------------

def test_50_mb_of_program_loads_and_text_over_the_size_limit_is_refused_before_parsing():
    program = _relu_program()
    program.global_block().ops[0].attrs["note"] = "x" * (50 * 2 ** 20)   # 50 MiB, valid
    started = time.perf_counter()
    loaded = ex.Program.from_json(program.to_json())
    assert len(loaded.global_block().ops[0].attrs["note"]) == 50 * 2 ** 20
    assert time.perf_counter() - started < 10
    limit = _limit("MAX_PROGRAM_CHARS")
    program.global_block().ops[0].attrs["note"] = "x" * limit
    text = program.to_json()
    started = time.perf_counter()
    with pytest.raises(ex.ProgramError, match=rf"program: expected at most {limit} "
                                              rf"characters of JSON, got {len(text)}"):
        ex.Program.from_json(text)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("where", ["document", "attr"])
def test_nesting_5000_deep_is_a_program_error_not_a_recursion_error(where):
    deep = "[" * 5000 + "]" * 5000
    if where == "document":
        text = deep
    else:
        text = _relu_program().to_json().replace('"attrs": {}', f'"attrs": {{"a": {deep}}}')
    limit = _limit("MAX_NESTING")
    with pytest.raises(ex.ProgramError, match=rf"program: expected JSON nested at most "
                                              rf"{limit} levels deep, got more"):
        ex.Program.from_json(text)


def test_an_attr_nested_past_the_limit_but_under_the_parser_is_refused():
    deep = "[" * 100 + "]" * 100
    text = _relu_program().to_json().replace('"attrs": {}', f'"attrs": {{"a": {deep}}}')
    limit = _limit("MAX_NESTING")
    with pytest.raises(ex.ProgramError, match=rf"blocks\[0\]\.ops\[0\]\.attrs\['a'\]: "
                                              rf"expected JSON nested at most {limit} "
                                              rf"levels deep, got 100"):
        ex.Program.from_json(text)


def _chain(ops: int) -> dict:
    """The dict of a program of ``ops`` relu ops in a chain (written directly: building
    100,000 ops through the IR and ``to_json`` takes longer than loading them)."""
    var = {"shape": [-1, 3], "dtype": "float32", "persistable": False,
           "stop_gradient": False, "place": None, "is_parameter": False}
    return {"format": "aluminum-program/1", "random_seed": 0, "blocks": [{
        "idx": 0,
        "vars": [{"name": f"v{i}", **var} for i in range(ops + 1)],
        "ops": [{"type": "relu", "inputs": {"X": [f"v{i}"]}, "outputs": {"Out": [f"v{i + 1}"]},
                 "attrs": {}, "place": None} for i in range(ops)]}]}


def test_100000_ops_load_checked_in_bounded_time_and_the_last_op_is_checked_too():
    """Bounded: under 30 s, or (on a machine too loaded for that) under 6 times as long as
    writing the same JSON with the C encoder takes, measured alongside."""
    started = time.perf_counter()
    good = json.dumps(_chain(100_000), indent=1)
    writing = time.perf_counter() - started
    last = good.rindex('"type": "relu"')
    bad = good[:last] + '"type": "frobnicate"' + good[last + len('"type": "relu"'):]
    started = time.perf_counter()
    loaded = ex.Program.from_json(good)
    seconds = time.perf_counter() - started
    assert len(loaded.global_block().ops) == 100_000
    assert seconds < max(30, 6 * writing), \
        f"loading and checking 100,000 ops took {seconds:.1f} s (writing: {writing:.1f} s)"
    with pytest.raises(ex.ProgramError, match=r"blocks\[0\]\.ops\[99999\]: "
                                              r"op 'frobnicate': no such op type"):
        ex.Program.from_json(bad)


# -- feeds ------------------------------------------------------------------------------

@pytest.mark.parametrize("places", [None, PLACES], ids=["one place", "two places"])
def test_a_feed_that_is_no_array_is_named_before_the_place_splitter_sees_it(places):
    main, _, loss, scope, feed = _fit_a_line()
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, places=places)
    before = _snapshot(scope)
    with pytest.raises(ex.ProgramError, match=r"feed 'x': expected an array of float32 with "
                                              r"shape \[-1, 13\], got str 'abc'"):
        runner.run([loss], {"x": "abc", "y": feed["y"]})
    _assert_untouched(scope, before)
    runner.close()


def test_a_feed_that_is_no_array_is_named_by_the_sequential_executor_too():
    main, _, loss, scope, feed = _fit_a_line()
    with pytest.raises(ex.ProgramError, match=r"feed 'x': expected an array of float32 with "
                                              r"shape \[-1, 13\], got str 'abc'"):
        ex.Executor().run(main, {"x": "abc", "y": feed["y"]}, [loss], scope)


def _classifier(label_dtype="int64"):
    """A forward-only program: loss = mean(softmax_with_cross_entropy(logits, label)) over
    5 classes; the logits are fed, so the test computes the reference itself."""
    program = ex.Program()
    with ex.program_guard(program, ex.Program()):
        logits = layers.data("logits", [5], "float64")
        label = layers.data("label", [1], label_dtype)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
    return program, loss, np.random.default_rng(1).normal(size=(8, 5))


def _reference_loss(logits, label):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(label)), label[:, 0]].mean()


def _executors(program, loss):
    """A forward-only program runs on one place (more need a backward pass)."""
    yield "Executor", lambda feed: ex.Executor().run(program, feed, [loss], ex.Scope())
    for threads in (1, 2):
        runner = ex.ParallelExecutor(program, scope=ex.Scope(),
                                     exec_strategy=ex.ExecutionStrategy(num_threads=threads))
        yield f"ParallelExecutor threads={threads}", lambda feed: runner.run([loss], feed)


@pytest.mark.parametrize("labels, dtype, message", [
    ([[0], [1], [2], [3]], "int64",
     r"Label: expected one label per row of Logits \(shape \[8, 1\]\), got shape \[4, 1\]"),
    ([[0], [1], [-1], [3], [4], [0], [1], [2]], "int64",
     r"Label: expected class indices in \[0, 5\), got -1 \(row 2\)"),
    ([[0], [1], [2], [3], [4], [5], [1], [2]], "int64",
     r"Label: expected class indices in \[0, 5\), got 5 \(row 5\)"),
    ([[0], [1], [2], [3], [4], [0], [1], [2]], "float64",
     r"Label: expected an array of integers, got float64"),
], ids=["shorter batch", "negative", "too large", "float"])
def test_bad_labels_are_execution_errors_naming_the_op_and_the_range(labels, dtype, message):
    program, loss, logits = _classifier(dtype)
    feed = {"logits": logits, "label": np.array(labels, dtype)}
    for name, run in _executors(program, loss):
        with pytest.raises(ex.ExecutionError,
                           match=rf"op softmax_with_cross_entropy on cpu failed: "
                                 rf"ValueError: {message}"):
            run(feed)


def test_good_labels_still_give_the_reference_loss():
    program, loss, logits = _classifier()
    label = np.array([[0], [1], [2], [3], [4], [0], [1], [4]], np.int64)
    expected = _reference_loss(logits, label)
    value, = ex.Executor().run(program, {"logits": logits, "label": label}, [loss], ex.Scope())
    np.testing.assert_allclose(value, [expected], rtol=1e-12)


# -- NaN / Inf ---------------------------------------------------------------------------

def _overflowing():
    """big = x * 1e300 (finite for |x| <= 1), square = big * big (inf), out = relu(square)."""
    program = ex.Program()
    with ex.program_guard(program, ex.Program()):
        x = layers.data("x", [2], "float64")
        big = layers.scale(x, 1e300)
        square = layers.elementwise_mul(big, big)
        out = layers.relu(square)
    return program, x, big, square, out


def _nan_inf_runners(program, check):
    yield "Executor", lambda feed, fetch, scope: ex.Executor(check_nan_inf=check).run(
        program, feed, fetch, scope)
    for threads in (1, 2):
        strategy = ex.ExecutionStrategy(num_threads=threads, check_nan_inf=check)
        yield (f"ParallelExecutor threads={threads}",
               lambda feed, fetch, scope, strategy=strategy: ex.ParallelExecutor(
                   program, scope=scope, exec_strategy=strategy).run(fetch, feed))


def test_check_nan_inf_names_the_first_op_whose_output_is_not_finite():
    program, _, _, square, out = _overflowing()
    feed = {"x": np.array([[0.5, 1.0], [1.0, -0.25]])}
    for name, run in _nan_inf_runners(program, True):
        scope = ex.Scope()
        with np.errstate(over="ignore"), pytest.raises(
                ex.ExecutionError,
                match=rf"op elementwise_mul on cpu: output {square.name!r} is not finite "
                      rf"\(inf at \[0, 0\]\) \(check_nan_inf\)"):
            run(feed, [out], scope)
        assert out.name not in scope, name     # nothing after the bad op ran


def test_check_nan_inf_names_a_feed_that_is_not_finite():
    program, x, _, _, out = _overflowing()
    feed = {"x": np.array([[0.5, np.nan], [1.0, -0.25]])}
    for name, run in _nan_inf_runners(program, True):
        scope = ex.Scope()
        with pytest.raises(ex.ProgramError,
                           match=r"feed 'x': expected finite values \(check_nan_inf\), got nan "
                                 r"at \[0, 1\]"):
            run(feed, [out], scope)
        assert not scope, name


def test_without_check_nan_inf_inf_flows_through_as_numpy_computes_it():
    program, _, _, _, out = _overflowing()
    x = np.array([[0.5, 1.0], [1.0, -0.25]])
    with np.errstate(over="ignore"):
        expected = np.maximum((x * 1e300) * (x * 1e300), 0)
    for name, run in _nan_inf_runners(program, False):
        with np.errstate(over="ignore"):
            value, = run({"x": x}, [out], ex.Scope())
        np.testing.assert_array_equal(value, expected, err_msg=name)


def test_check_nan_inf_catches_a_diverging_training_run_and_names_the_op():
    """SGD with a rate that diverges, on every executor (two places too): the run stops at
    the first op whose output is not finite, and that output is left in the scope to look
    at."""
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", [2], "float64")
        y = layers.data("y", [1], "float64")
        loss = layers.mean(layers.square_error_cost(layers.fc(x, 1, dtype="float64",
                                                              name="fc"), y))
        ex.SGD(learning_rate=1e6).minimize(loss)
    feed = {"x": np.full((4, 2), 1e3), "y": np.zeros((4, 1))}
    strategy = ex.ExecutionStrategy(check_nan_inf=True)

    def sequential(scope):
        return lambda: ex.Executor(check_nan_inf=True).run(main, feed, [loss], scope)

    def parallel(places):
        def make(scope):
            runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                         places=places, exec_strategy=strategy)
            return lambda: runner.run([loss], feed)
        return make

    runners = {"Executor": sequential, "ParallelExecutor": parallel(None),
               "two places": parallel(PLACES)}
    for name, make in runners.items():
        scope = ex.Scope()
        ex.Executor().run(startup, scope=scope)
        step = make(scope)
        with np.errstate(all="ignore"), pytest.raises(ex.ExecutionError) as error:
            for _ in range(50):
                step()
        match = re.fullmatch(r"op (\w+) on cpu\S*: output '([^']+)' is not finite "
                             r"\((inf|nan) at \[[\d, ]*\]\) \(check_nan_inf\)",
                             str(error.value))
        assert match, (name, str(error.value))
        assert not np.isfinite(scope[match.group(2)]).all(), name


def test_check_nan_inf_is_off_by_default():
    assert ex.ExecutionStrategy().check_nan_inf is False
