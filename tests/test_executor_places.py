"""Several places in one process (aluminum/executor/places.py) and parallel_do, which lowers
onto them: training on P places equals the sequential executor on the whole batch."""
import threading

import numpy as np
import pytest

import aluminum.executor as ex
from aluminum.executor import layers


def _mlp(batch_norm=False):
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 5
    with ex.program_guard(main, startup):
        x = layers.data("x", [6], "float64")
        y = layers.data("y", [1], "int64")
        hidden = layers.fc(x, 8, act="tanh", dtype="float64", name="h")
        if batch_norm:
            hidden = layers.batch_norm(hidden, name="bn")
        logits = layers.fc(hidden, 3, dtype="float64", name="out")
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        ex.Adam(0.01).minimize(loss)
    rng = np.random.default_rng(3)
    return main, startup, loss, {"x": rng.normal(size=(12, 6)), "y": rng.integers(0, 3, (12, 1))}


def _params(main, scope):
    return {v.name: scope[v.name].copy() for v in main.global_block().vars.values()
            if v.is_parameter}


def _train(main, startup, loss, feed, steps=3, threads=None, places=1):
    """(parameters, last fetched loss) after ``steps`` runs: sequential when ``threads`` is
    None, else a ParallelExecutor on ``places`` places."""
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    if threads is None:
        run = lambda: ex.Executor().run(main, feed, [loss], scope)   # noqa: E731
    else:
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                     places=[f"cpu:{i}" for i in range(places)],
                                     exec_strategy=ex.ExecutionStrategy(threads))
        run = lambda: runner.run([loss], feed)   # noqa: E731
    for _ in range(steps):
        value, = run()
    if threads is not None:
        runner.close()
    return _params(main, scope), value


@pytest.mark.parametrize("places", [1, 2, 3])
@pytest.mark.parametrize("threads", [1, 3])
def test_places_train_like_one_device_on_the_whole_batch(places, threads):
    params, value = _train(*_mlp(), threads=threads, places=places)
    assert value.shape == (places,)
    for name, expected in _train(*_mlp())[0].items():
        np.testing.assert_allclose(params[name], expected, rtol=1e-10, err_msg=name)


def test_batch_norm_statistics_come_from_place_zero_only():
    """Each place normalizes its own rows (as Paddle's places do), and a replica's running
    statistics go to place-local variables: the shared ones are written once per step."""
    main, startup, loss, feed = _mlp(batch_norm=True)
    program = ex.data_parallel_program(main, loss.name, 2, places=2, across_ranks=False)
    writers = [op for op in program.global_block().ops
               if any(name.startswith("bn.") and "@" not in name for name in op.output_names())
               and op.type == "batch_norm"]
    assert len(writers) == 1
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                 places=["cpu:0", "cpu:1"])
    first, = runner.run([loss], feed)
    for _ in range(20):
        last, = runner.run([loss], feed)
    runner.close()
    assert last.mean() < first.mean() and all(np.isfinite(v).all() for v in scope.values())


def test_replicas_run_on_place_local_variables_and_gradients_are_summed_in_place_order():
    main, _, loss, _ = _mlp()
    program = ex.data_parallel_program(main, loss.name, 2, places=2, across_ranks=False)
    ops = program.global_block().ops
    merges = [op for op in ops if op.type == "sum" and op.outputs["Out"] == ["out.w@GRAD"]]
    assert len(merges) == 1 and merges[0].inputs["X"] == ["out.w@GRAD", "out.w@GRAD@place1"]
    optimizer = [op for op in ops if op.type == "adam"]
    assert len(optimizer) == 4                       # once per parameter, not per place
    assert not any(op.type == "allreduce" for op in ops)


def test_a_batch_smaller_than_the_places_is_a_clear_error():
    main, startup, loss, feed = _mlp()
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                 places=["cpu:0", "cpu:1", "cpu:2"])
    with pytest.raises(ex.ProgramError, match="cannot be split over 3 places"):
        runner.run([loss], {"x": feed["x"][:2], "y": feed["y"][:2]})
    runner.close()


def _parallel_do_mlp(places):
    """The MLP of ``_mlp`` with its forward pass inside a parallel_do over ``places``."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = 5
    with ex.program_guard(main, startup):
        x = layers.data("x", [6], "float64")
        y = layers.data("y", [1], "int64")
        pd = layers.ParallelDo([f"cpu:{i}" for i in range(places)])
        with pd.do():
            x_, y_ = pd.read_input(x), pd.read_input(y)
            hidden = layers.fc(x_, 8, act="tanh", dtype="float64", name="h")
            logits = layers.fc(hidden, 3, dtype="float64", name="out")
            pd.write_output(layers.mean(layers.softmax_with_cross_entropy(logits, y_)))
        loss = layers.mean(pd())
        ex.Adam(0.01).minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("places", [1, 2, 3])
def test_parallel_do_trains_like_one_device_on_the_whole_batch(places):
    main, startup, loss = _parallel_do_mlp(places)
    assert sum(op.type == "mul" or op.type == "matmul" for op in main.global_block().ops) \
        == 2 * places
    feed = _mlp()[3]
    sequential, _ = _train(main, startup, loss, feed)
    out_of_order, _ = _train(main, startup, loss, feed, threads=3)
    for name, expected in _train(*_mlp())[0].items():
        np.testing.assert_allclose(sequential[name], expected, rtol=1e-10, err_msg=name)
        np.testing.assert_array_equal(out_of_order[name], sequential[name], err_msg=name)


def test_parallel_do_misuse_is_a_clear_error():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", [2])
        pd = layers.ParallelDo(["cpu:0", "cpu:1"])
        with pytest.raises(ex.ProgramError, match="after the `with pd.do\\(\\):` block"):
            pd()
        with pytest.raises(ex.ProgramError, match="does not produce it"):
            with pd.do():
                pd.read_input(x)
                pd.write_output(x)
    with pytest.raises(ex.ProgramError, match="at least one place"):
        layers.ParallelDo([])


def test_close_ends_the_workers_and_lets_go_of_the_last_run():
    """No worker outlives ``close()``: a sleeping worker held its last run (and the bucket
    views of its ops), so a communicator freed right after found its shared buckets still
    referenced, depending on which thread ran the last op."""
    main, startup, loss, feed = _mlp()
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    before = {thread for thread in threading.enumerate()}
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                 places=["cpu:0", "cpu:1"], exec_strategy=ex.ExecutionStrategy(3))
    for _ in range(3):
        runner.run([loss], feed)
    workers = [thread for thread in threading.enumerate()
               if thread not in before and thread.name.startswith("al-executor")]
    assert workers, "the executor started no worker threads"
    runner.close()
    assert not [thread for thread in workers if thread.is_alive()]
