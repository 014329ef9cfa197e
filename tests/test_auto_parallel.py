"""AUTO_PARALLEL (issue 28 items 5 and 7): the executor searches the strategies itself.

Launched on 2 and 4 ranks: tests/mpi/auto_parallel_ranks.py (training equal to numpy under
the searched strategies, unbounded and under a memory bound; errors on every rank; the
calibrated model agreed and cached).  Below, one process: the memory bound in the search
(equal to brute force, data parallel unbounded and model parallel bounded), the first
layer's missing input gradient, the fc-chain reader and its errors, the calibration cache,
the measured kernel and step costs and the overlap of gradient reductions.
"""
import dataclasses
import json
import os
import types

import numpy as np
import pytest

import aluminum.executor as ex
from aluminum.executor import layers
from aluminum.executor.layouts import plan_redistribution
from aluminum.executor.sharding import calibrate
from aluminum.executor.sharding.auto import fc_chain, search_program
from aluminum.executor.sharding.search import (ChainCost, CostModel, Layer, brute_force,
                                               candidates, data_parallel, estimate, search)
from test_multirank import run_ranks

MODEL = CostModel(alpha=2e-6, beta=2e-10, flops=5e9, bandwidth=1e10, op=5e-6, call=1e-5)
ADAM_MLP = [Layer(192, 128, 128, True, None, 2)] * 6


@pytest.mark.parametrize("ranks", [2, 4])
def test_auto_parallel_on_ranks(ranks, tmp_path):
    run_ranks("auto_parallel_ranks.py", ranks, tmp_path)


@pytest.mark.parametrize("nranks", [2, 4])
def test_a_memory_bound_turns_data_parallel_into_model_parallel(nranks):
    found, _ = search(ADAM_MLP, nranks, MODEL)
    assert found == [data_parallel(nranks)] * 6
    dp = estimate(ADAM_MLP, nranks, found, MODEL)
    bounded, _ = search(ADAM_MLP, nranks, MODEL, max_memory=0.95 * dp.memory)
    assert all(s[1] != (1, 1) for s in bounded), bounded        # every weight split
    assert estimate(ADAM_MLP, nranks, bounded, MODEL).memory <= 0.95 * dp.memory
    with pytest.raises(ex.ProgramError, match="no strategy of the 6 fc layers fits"):
        search(ADAM_MLP, nranks, MODEL, max_memory=1000)


CHAINS = [[Layer(16, 40, 24), Layer(16, 24, 9), Layer(16, 9, 30)],
          [Layer(32, 64, 64, True, None, 2)] * 4 + [Layer(32, 64, 5, False)],
          [Layer(64, 16, 48), Layer(64, 48, 48, True, None, 1), Layer(64, 48, 3)]]


@pytest.mark.parametrize("index", range(len(CHAINS)))
@pytest.mark.parametrize("fraction", [0.5, 0.8, 1.0])
def test_the_bounded_search_equals_brute_force(index, fraction):
    chain, nranks = CHAINS[index], 4
    cost = ChainCost(chain, nranks, MODEL)
    memories = sorted(cost.estimate([s] * len(chain)).memory
                      for s in range(len(cost.strategies)))
    bound = memories[0] + fraction * (memories[-1] - memories[0])
    for tie in (True, False):
        found, value = search(chain, nranks, MODEL, tie, bound)
        expected, best = brute_force(chain, nranks, MODEL, tie, bound)
        assert value == pytest.approx(best, rel=1e-12)
        assert estimate(chain, nranks, found, MODEL).memory <= bound


def test_the_first_layer_pays_no_input_gradient():
    """A column-parallel layer's input gradient is Partial (an allreduce) -- except the
    first layer's: its input is data.  One matmul fewer too."""
    column = ((1, 1), (1, 4))
    layer = Layer(16, 32, 32)
    cost = ChainCost([layer], 4, MODEL)
    first = cost.node(layer, cost.strategies.index(column), first=True)
    later = cost.node(layer, cost.strategies.index(column))
    assert first.collectives == 0 and later.collectives == 1
    assert later.time - first.time > 2 * 16 * 32 * 32 / 4 / MODEL.flops


def program(widths=(6, 5, 3), optimizer=ex.SGD, branch=False, shard=None):
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        h = layers.data("x", (8, widths[0]), "float64", append_batch_size=False)
        t = layers.data("t", (8, widths[-1]), "float64", append_batch_size=False)
        x = h
        for i, width in enumerate(widths[1:]):
            h = layers.fc(x if branch and i else h, width, act="tanh" if i == 0 else None,
                          shard=shard if i == 0 else None)
        loss = layers.mean(layers.square_error_cost(h, t))
        optimizer(0.1).minimize(loss)
    return main


def test_the_fc_chain_is_read_from_the_program():
    chain, matmuls = fc_chain(program(optimizer=ex.Adam, shard=((2, 1), (1, 1))))
    assert chain == [Layer(8, 6, 5, True, ((2, 1), (1, 1)), 2), Layer(8, 5, 3, False, None, 2)]
    assert [op.type for op in matmuls] == ["matmul", "matmul"]
    found = search_program(program(shard=((1, 1), (1, 2))), 2, MODEL)
    assert found.strategies[0] == ((1, 1), (1, 2))      # a hand strategy is kept
    assert found.estimate.time > 0 and found.seconds < 1


@pytest.mark.parametrize("build, message", [
    (lambda: program(widths=(6, 5, 5), branch=True), "not the previous layer's output"),
    (lambda: _with_tail_matmul(), "multiplies or reads a parameter"),
    (lambda: _softmax_first(), "does not start with an fc layer"),
])
def test_unsupported_graphs_name_the_op(build, message):
    with pytest.raises(ex.ProgramError, match=message) as error:
        fc_chain(build())
    assert "AUTO_PARALLEL searches chains of fc layers" in str(error.value)
    assert str(error.value).startswith("op ")


def _with_tail_matmul():
    main = program()
    block = main.global_block()
    block.ops.insert(3, block.ops[3].__class__("matmul", {"X": ["x"], "Y": ["x"]},
                                                {"Out": ["x2"]}, {}))
    block.create_var("x2", (8, 8), "float64")
    ops = block.ops
    ops.insert(len([o for o in ops if o.attrs.get("op_role") is None]) - 1, ops.pop(3))
    return main


def _softmax_first():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.data("x", (8, 6), "float64", append_batch_size=False)
        layers.mean(layers.fc(layers.softmax(x), 3))
    return main


def _counted_measure(calls: list):
    """A stand-in for ``calibrate.measure``: fixed rates, each call counted in ``calls``."""
    def measure(*args, **kwargs):
        calls.append(1)
        return {"flops": 1e9, "bandwidth": 2e9, "op": 3e-6, "call": 0.0, "reduction_call": 0.0,
                "bucket_call": 0.0, "activation": 1e-8, "compute_scale": 1.0, "op_scale": 1.0}
    return measure


def test_the_calibration_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("AL_PROFILE_STRIDE_S", "0")   # (the cache is tested, not timings)
    path = tmp_path / "rates.json"
    monkeypatch.setenv("AL_AUTO_PARALLEL_FILE", str(path))
    calls = []
    monkeypatch.setattr(calibrate, "measure", _counted_measure(calls))
    first = calibrate.machine_model()
    assert calibrate.machine_model() == first and len(calls) == 1
    assert json.loads(path.read_text())["ranks=1,itemsize=8"]["flops"] == 1e9
    assert (first.flops, first.bandwidth, first.op) == (1e9, 2e9, 3e-6)
    assert (first.alpha, first.beta) == tuple(calibrate.alpha_beta())
    calibrate.machine_model(refresh=True)
    assert len(calls) == 2


def test_a_cached_entry_without_a_fitted_value_is_measured_again(tmp_path, monkeypatch):
    """An entry written before ``op_scale`` was fitted (every other rate present) is not
    used: the machine is measured again and the entry replaced."""
    monkeypatch.setenv("AL_PROFILE_STRIDE_S", "0")   # (the cache is tested, not timings)
    path = tmp_path / "rates.json"
    monkeypatch.setenv("AL_AUTO_PARALLEL_FILE", str(path))
    old = {name: 1.0 for name in calibrate.RATES if name != "op_scale"}
    path.write_text(json.dumps({"ranks=1,itemsize=8": {**old, "steps": []}}))
    calls = []
    monkeypatch.setattr(calibrate, "measure", _counted_measure(calls))
    model = calibrate.machine_model()
    assert len(calls) == 1 and model.flops == 1e9
    assert "op_scale" in json.loads(path.read_text())["ranks=1,itemsize=8"]


def test_measure_gives_rates_of_this_machine():
    rates = calibrate.measure()
    assert 1e7 < rates["flops"] < 1e14 and 1e7 < rates["bandwidth"] < 1e13
    assert 0 < rates["op"] < 1e-2 and rates["call"] == 0.0 and rates["compute_scale"] == 1.0
    assert rates["op_scale"] == 1.0
    assert 0 < rates["activation"] < 1e-5


def test_measured_kernel_and_step_times_replace_the_rates():
    """A model with a layer's kernels and the allreduce step measured costs data
    parallelism with them: forward + backward + the executor's cost per op, then the weight
    and bias gradients' allreduces at α + β per byte the busiest rank receives (a ring
    allreduce of B bytes on 2 ranks receives B), none of it hidden: one layer has no layer
    before it to compute under its reductions; then the sum of the loss, split by the
    batch: one float64 allreduced, an op and α + 8 β."""
    layer = Layer(8, 4, 6)
    key = (4, 4, 6, True, 0)          # the rows of a batch split in two
    alpha, beta = 3e-4, 1e-9
    model = CostModel(op=1e-6, kernels=((key, 2e-3, 5e-3),),
                      steps=(("allreduce", 2, alpha, beta),))
    found = estimate([layer], 2, [data_parallel(2)], model)
    reductions = 2 * model.op + 2 * alpha + beta * 8 * (4 * 6 + 6)
    loss = model.op + alpha + beta * 8
    assert found.time == pytest.approx(2e-3 + 5e-3 + 8 * model.op + reductions + loss,
                                       rel=1e-12)
    assert found.reduction == pytest.approx(reductions, rel=1e-12)


def test_the_scales_apply_to_kernels_and_to_the_executors_ops_apart():
    """``compute_scale`` multiplies a layer's measured kernels and ``op_scale`` the
    executor's cost of its ops (3 forward, 5 backward and update: 8 for a first layer);
    neither touches the gradient sums (α, β and the op running them)."""
    layer = Layer(8, 4, 6)
    model = CostModel(op=1e-6, kernels=(((4, 4, 6, True, 0), 2e-3, 5e-3),),
                      steps=(("allreduce", 2, 3e-4, 1e-9),))

    def time(**scales):
        return estimate([layer], 2, [data_parallel(2)],
                        dataclasses.replace(model, **scales)).time

    base = time()
    assert time(compute_scale=3.0) - base == pytest.approx(2 * (2e-3 + 5e-3), rel=1e-9)
    assert time(op_scale=5.0) - base == pytest.approx(4 * 8 * model.op, rel=1e-9)
    assert time(compute_scale=3.0, op_scale=5.0) - base == pytest.approx(
        2 * (2e-3 + 5e-3) + 4 * 8 * model.op, rel=1e-9)


def test_a_gradient_summed_over_every_rank_is_priced_as_the_allreduce_op():
    """The pass sums a gradient over every rank with the data-parallel ``allreduce`` op, so
    the model prices it with the measured ``sum`` step, and a forward Partial output (a
    redistribution) with ``allreduce``'s: data parallelism's weight and bias gradients
    both move to ``sum``; a row-parallel layer sums no gradient (its Partial output is
    summed forward, a redistribution); without ``sum`` measured, both are
    ``allreduce``'s."""
    layer = Layer(8, 4, 6)
    (a1, b1), (a2, b2) = (3e-4, 1e-9), (1e-4, 5e-10)
    redistributed = CostModel(op=1e-6, steps=(("allreduce", 2, a1, b1),))
    summed = CostModel(op=1e-6, steps=(("allreduce", 2, a1, b1), ("sum", 2, a2, b2)))
    weight, bias = 8 * 4 * 6, 8 * 6         # bytes the busiest of 2 ranks receives: all

    def gained(strategy):
        return estimate([layer], 2, [strategy], redistributed).time - \
            estimate([layer], 2, [strategy], summed).time

    assert gained(data_parallel(2)) == pytest.approx(
        2 * (a1 - a2) + (b1 - b2) * (weight + bias), rel=1e-9)
    assert gained(((1, 2), (2, 1))) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("nranks", [2, 4])
def test_the_model_prices_the_parameter_gradient_collectives_the_pass_emits(nranks):
    """For every candidate strategy, as the first layer and after another: the collective
    steps the model counts for a layer's weight and bias gradients are those of the
    ``allreduce`` and ``redistribute`` ops the SEMI_AUTO_PARALLEL pass makes them with."""
    for strategy in candidates(nranks):
        for first in (True, False):
            ex.reset_unique_names()
            main, startup = ex.Program(), ex.Program()
            with ex.program_guard(main, startup):
                h = layers.data("x", (8, 6), "float64", append_batch_size=False)
                if not first:
                    h = layers.fc(h, 6, name="pre", shard=((1, 1), (1, 1)))
                out = layers.mean(layers.fc(h, 4, act="tanh", name="l", shard=strategy))
                ex.SGD(0.1).minimize(out)
            block = ex.shard_program(main, types.SimpleNamespace(size=nranks, rank=0),
                                     out.name).global_block()
            emitted = 0
            for op in block.ops:
                grads = [n for n in op.output_names() if n in ("l.w@GRAD", "l.b@GRAD")]
                if grads and op.type == "allreduce":
                    emitted += 1
                elif grads and op.type == "redistribute":
                    plan = plan_redistribution(block.var(op.inputs["X"][0]).layout,
                                               block.var(grads[0]).layout,
                                               block.var(grads[0]).shape, "float64")
                    emitted += len(plan.collectives)
            chain = [Layer(8, 6, 4)] if first else [Layer(8, 6, 6), Layer(8, 6, 4)]
            strategies = [strategy] if first else [((1, 1), (1, 1)), strategy]
            priced = estimate(chain, nranks, strategies, CostModel()).reductions
            assert priced == emitted, (strategy, first)


@pytest.mark.parametrize("first, cap, buckets", [(1.0, 1.0, 1), (0.25, 1.0, 2),
                                                 (0.5, 0.25, 3)])
def test_fused_gradient_sums_pay_for_the_buckets_they_fill(first, cap, buckets):
    """Under ``buckets`` (BuildStrategy's fused gradient sums; ``first`` and ``cap`` here
    as shares of all the parameters' bytes) data parallelism's six weight and bias sums
    pay the op, α and ``bucket_call`` of the buckets their bytes fill (the first bucket,
    then as many of ``cap`` as the rest needs), where unfused each pays its op, α and
    ``reduction_call``; the bytes cost the same."""
    layers = [Layer(8, 4, 6), Layer(8, 6, 6), Layer(8, 6, 3)]
    op, alpha, call, bucket_call = 2e-6, 1e-4, 3e-5, 7e-4
    mb = 8 * sum(l.inputs * l.outputs + l.outputs for l in layers) / 2**20
    unfused = CostModel(op=op, reduction_call=call, overlap=0.0, bucket_call=bucket_call,
                        steps=(("sum", 2, alpha, 1e-9),))
    fused = dataclasses.replace(unfused, buckets=(first * mb, cap * mb))
    saved = estimate(layers, 2, [data_parallel(2)] * 3, unfused).time - \
        estimate(layers, 2, [data_parallel(2)] * 3, fused).time
    assert saved == pytest.approx(6 * (op + alpha + call) -
                                  buckets * (op + alpha + bucket_call), rel=1e-9)
    assert estimate(layers, 2, [data_parallel(2)] * 3, fused).reductions == \
        pytest.approx(buckets, rel=1e-9)


def test_a_reduction_hides_under_the_previous_layers_gradients():
    """Two data-parallel layers: the second layer's reductions run while the first layer
    computes its gradients, so they cost only what the first layer's backward does not
    cover (the loss's sum after the last layer: one α, once)."""
    key = (4, 4, 4, True, 0)
    steps = (("allreduce", 2, 1e-3, 0.0),)
    layer = Layer(8, 4, 4)
    reduction, loss = 2e-3, 1e-3            # weight and bias: one α each; the loss: one
    for backward in (1e-2, 5e-4):           # hides all of it, a quarter of it
        model = CostModel(op=0.0, kernels=((key, 1e-3, backward),), steps=steps)
        one = estimate([layer], 2, [data_parallel(2)], model).time
        two = estimate([layer, layer], 2, [data_parallel(2)] * 2, model).time
        assert one == pytest.approx(1e-3 + backward + reduction + loss, rel=1e-12)
        assert two == pytest.approx(2 * (one - loss) - min(reduction, backward) + loss,
                                    rel=1e-12)


@pytest.mark.parametrize("buckets", [1, 2])
def test_a_fused_bucket_hides_only_if_another_fills_after_it(buckets):
    """Fused (``CostModel.buckets``), two data-parallel layers' sums hide under the first
    layer's gradients only as far as they are not the last bucket's: a bucket starts once
    its last gradient is computed, and the last to fill holds the first layer's.  One
    bucket: nothing hides (both layers' kernels, then the bucket); two buckets (one per
    layer): the second layer's hides, where unfused every sum of it would."""
    key = (4, 4, 4, True, 0)
    layer = Layer(8, 4, 4)
    mb = 8 * 2 * (4 * 4 + 4) / 2**20          # both layers' weights and biases
    base = CostModel(op=0.0, kernels=((key, 1e-3, 1e-2),), bucket_call=1e-3,
                     steps=(("sum", 2, 0.0, 0.0), ("allreduce", 2, 0.0, 0.0)))  # (the loss's)
    fused = dataclasses.replace(base, buckets=(mb / buckets, mb))
    one_layer = dataclasses.replace(base, buckets=(1.0, 1.0))
    one = estimate([layer], 2, [data_parallel(2)], one_layer)
    two = estimate([layer, layer], 2, [data_parallel(2)] * 2, fused)
    sums = buckets * 1e-3                     # each bucket's call
    hidden = sums / 2 * (buckets - 1) / buckets     # the second layer's share that hides
    assert two.time == pytest.approx(2 * (1e-3 + 1e-2) + sums - hidden, rel=1e-12)
    assert one.time == pytest.approx(1e-3 + 1e-2 + 1e-3, rel=1e-12)


def test_without_cores_to_spare_a_reduction_hides_nothing():
    """``overlap=0`` (each rank's communication thread takes turns with its computation on
    one core): two data-parallel layers cost twice one."""
    key = (4, 4, 4, True, 0)
    model = CostModel(op=0.0, kernels=((key, 1e-3, 1e-2),), steps=(("allreduce", 2, 1e-3, 0.0),),
                      overlap=0.0)
    layer = Layer(8, 4, 4)
    one = estimate([layer], 2, [data_parallel(2)], model).time
    loss = 1e-3                                 # the split loss's sum, once per chain
    assert one == pytest.approx(1e-3 + 1e-2 + 2e-3 + loss, rel=1e-12)
    assert estimate([layer, layer], 2, [data_parallel(2)] * 2, model).time == \
        pytest.approx(2 * (one - loss) + loss, rel=1e-12)



@pytest.mark.parametrize("local_size, cores, threads", [(2, 2, 1), (4, 2, 1), (2, 3, 1),
                                                        (2, 4, 2), (1, 2, 2), (8, 16, 2)])
def test_the_executor_runs_a_second_thread_only_on_a_core_to_spare(monkeypatch, local_size,
                                                                   cores, threads):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert ex.default_threads(_Node(local_size)) == threads
    assert ex.default_threads(None) == (2 if cores >= 2 else 1)


def test_program_model_measures_every_candidate_layer():
    """The kernels measured for a program are those of its layers at the local shapes the
    search may try (one rank: the whole ones), and its loss at the last layer's output,
    so the search never falls back to the rates."""
    model = calibrate.program_model(program(widths=(6, 5, 3)))
    # batch 8: 6 -> 5 with tanh, 5 -> 3 without; SGD keeps no optimizer arrays
    assert {key for key, _, _ in model.kernels} == {(8, 6, 5, True, 0), (8, 5, 3, False, 0)}
    assert all(0 < f < 1 and 0 < b < 1 for _, f, b in model.kernels)
    # square_error_cost and mean, their gradients and the loss gradient's fill_constant
    assert [(key, ops) for key, _, ops in model.tail] == [((8, 3), 5)]
    assert 0 < model.tail[0][1] < 1


def test_the_loss_is_measured_on_every_part_of_the_output_a_strategy_gives():
    """Split by columns too (a column-parallel last layer): the regression target is cut
    as the output is, so the loss runs on every part, the batch's and the columns'."""
    from aluminum.executor.sharding import profile
    main = program(widths=(6, 5, 4))
    chain, _ = fc_chain(main)
    tail = profile.tail_times(main, chain, candidates(2))
    # batch 8 x 4 outputs: whole, rows split in 2, columns split in 2
    assert sorted(key for key, _, _ in tail) == [(4, 4), (8, 2), (8, 4)]
    assert all(0 < seconds < 1 and ops == 5 for _, seconds, ops in tail)


def test_the_loss_after_the_chain_is_costed_and_searched():
    """The loss's measured kernels and ops count after the last layer; the sum of a loss
    computed from a batch split over two ranks (one allreduce) counts, measured or not,
    and not where the output is whole; the search sees them as brute force does."""
    layer, alpha = Layer(8, 4, 6), 3e-4
    steps = (("allreduce", 2, alpha, 0.0),)
    plain = CostModel(op=1e-6, steps=steps)
    tailed = CostModel(op=1e-6, steps=steps, tail=(((4, 6), 2e-3, 5), ((8, 6), 1e-3, 5)))
    gained = estimate([layer], 2, [data_parallel(2)], tailed).time - \
        estimate([layer], 2, [data_parallel(2)], plain).time
    assert gained == pytest.approx(2e-3 + 5 * tailed.op, rel=1e-12)
    summed = estimate([layer], 2, [data_parallel(2)], plain)
    whole = estimate([layer], 2, [((1, 1), (1, 1))], plain)
    assert (summed.collectives, whole.collectives) == (3, 0)   # weight, bias, the loss
    assert summed.moved == 2 * 8 * (4 * 6 + 6) + 2 * 8   # each rank receives the other's
    chain = [Layer(8, 6, 6), Layer(8, 6, 6)]
    tail = tuple(((rows, cols), 1e-3 * rows, 3) for rows in (4, 8) for cols in (3, 6))
    model = CostModel(op=1e-6, steps=steps, tail=tail)
    assert search(chain, 2, model)[1] == pytest.approx(brute_force(chain, 2, model)[1],
                                                       rel=1e-12)


def test_a_parameter_gradient_reduction_pays_reduction_call_and_the_critical_path_call():
    """Data parallelism's weight and bias reductions are charged ``reduction_call`` each
    and not ``call`` (its split loss's sum is: it is on the critical path); a row-parallel
    layer's Partial output (summed on the critical path before the bias) is charged
    ``call``, and its bias gradient nothing: the bias is added to the whole output, so
    every rank has its whole gradient."""
    layer = Layer(8, 4, 6)
    base = CostModel(op=1e-6, steps=(("allreduce", 2, 3e-4, 1e-9),))

    def extra(strategy, **calls):
        with_calls = dataclasses.replace(base, **calls)
        return estimate([layer], 2, [strategy], with_calls).time - \
            estimate([layer], 2, [strategy], base).time

    dp = estimate([layer], 2, [data_parallel(2)], base)
    assert (dp.collectives, dp.reductions) == (3, 2)   # weight, bias; and the loss
    assert extra(data_parallel(2), reduction_call=7e-3) == pytest.approx(2 * 7e-3, rel=1e-9)
    assert extra(data_parallel(2), call=5e-3) == pytest.approx(5e-3, rel=1e-9)
    row = ((1, 2), (2, 1))
    found = estimate([layer], 2, [row], base)
    assert (found.collectives, found.reductions) == (1, 0)    # the output's
    assert extra(row, call=5e-3) == pytest.approx(5e-3, rel=1e-9)
    assert extra(row, reduction_call=7e-3) == pytest.approx(0.0, abs=1e-15)


def _fit_programs(nranks):
    """(chain, strategies, model) of data-parallel (gradient sums fused or not), unsharded
    and Megatron chains with hand-made kernel and step costs (the first data-parallel
    chain's reductions longer than its layers' backward, so the overlap credit's min is in
    play; the last chain many ops of little computation)."""
    steps = tuple((kind, nranks, 2e-4, 1e-9) for kind in ("allreduce", "allgather"))
    model = CostModel(op=1e-6, steps=steps, flops=1e9, bandwidth=1e9)
    fused = dataclasses.replace(model, buckets=(1.0, 32.0))
    narrow, square = [Layer(64, 16, 16)] * 4, [Layer(32, 64, 64)] * 2
    megatron = [((1, 1), (1, nranks)), ((1, nranks), (nranks, 1))] * 2
    return [(narrow, [data_parallel(nranks)] * 4, model),
            (square, [data_parallel(nranks)] * 2, model),
            (square, [data_parallel(nranks)] * 2, fused),
            (square, [((1, 1), (1, 1))] * 2, model),
            ([Layer(32, 64, 64)] * 4, megatron, model),
            ([Layer(8, 8, 8)] * 8, [((1, 1), (1, 1))] * 8, model)]


@pytest.mark.parametrize("truth", [(2.0, 3.0, 3e-4, 8e-5, 1e-3),
                                   (1.5, 1.0, 0.0, 6e-4, 0.0)])
def test_the_fit_recovers_the_critical_path_and_reduction_costs(truth):
    """Steps timed as the model predicts them with known (compute_scale, op_scale, call,
    reduction_call, bucket_call) give those five back: six programs determine them
    apart."""
    programs = _fit_programs(2)
    measured = np.array([estimate(chain, 2, shards, dataclasses.replace(
        model, **dict(zip(calibrate.FITTED, truth)))).time
        for chain, shards, model in programs])
    assert calibrate.fit_step_costs(programs, measured, 2) == pytest.approx(truth, rel=1e-6,
                                                                           abs=1e-9)


def test_the_fit_holds_a_call_at_zero_and_one_rank_fits_only_the_scales():
    """A cost the steps cannot carry (a negative call) is held at 0 and the rest fitted
    without it; with one rank nothing is communicated, the calls are 0 and both scales
    fitted."""
    programs = _fit_programs(2)
    truth = dict(compute_scale=2.0, call=-1e-3, reduction_call=1e-4)
    measured = np.array([estimate(c, 2, s, dataclasses.replace(m, **truth)).time
                         for c, s, m in programs])
    scale, op_scale, call, reduction_call, bucket_call = calibrate.fit_step_costs(
        programs, measured, 2)
    assert call == 0.0 and scale > 0.1 and op_scale >= 1.0 and reduction_call >= 0.0 \
        and bucket_call >= 0.0
    one = [(c, [((1, 1), (1, 1))] * len(c), m) for c, _, m in programs]
    measured = np.array([estimate(c, 1, s, dataclasses.replace(m, compute_scale=3.0,
                                                               op_scale=2.0)).time
                         for c, s, m in one])
    assert calibrate.fit_step_costs(one, measured, 1) == pytest.approx(
        (3.0, 2.0, 0.0, 0.0, 0.0), rel=1e-9)


class _Node:
    """A communicator as ``profile.stride_seconds`` and ``default_threads`` see it:
    ``local_size`` ranks on this node."""

    def __init__(self, local_size):
        self.local_size = local_size


@pytest.mark.parametrize("local_size, cores, shared", [(1, 2, False), (2, 2, False),
                                                       (3, 2, True), (4, 2, True),
                                                       (4, 16, False)])
def test_kernels_are_timed_in_the_shorter_strides_where_ranks_outnumber_cores(
        monkeypatch, local_size, cores, shared):
    from aluminum.executor.sharding import profile
    monkeypatch.delenv("AL_PROFILE_STRIDE_S", raising=False)
    monkeypatch.setattr(profile.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert 0 < profile.STRIDE_S < profile.OWN_CORE_STRIDE_S
    expected = profile.STRIDE_S if shared else profile.OWN_CORE_STRIDE_S
    assert profile.stride_seconds(_Node(local_size)) == expected
    assert profile.stride_seconds(None) == profile.OWN_CORE_STRIDE_S


def test_the_stride_setting_wins_and_a_bad_one_warns(monkeypatch):
    from aluminum.executor.sharding import profile
    monkeypatch.setattr(profile.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("AL_PROFILE_STRIDE_S", "0")
    assert profile.stride_seconds(_Node(4)) == 0.0
    monkeypatch.setenv("AL_PROFILE_STRIDE_S", "0.002")
    assert profile.stride_seconds(_Node(1)) == 0.002
    monkeypatch.setenv("AL_PROFILE_STRIDE_S", "ten ms")
    with pytest.warns(RuntimeWarning, match="AL_PROFILE_STRIDE_S"):
        assert profile.stride_seconds(_Node(4)) == 0.01


@pytest.mark.parametrize("state", [0, 1, 2])
def test_every_layer_shape_of_every_strategy_is_timed_forward_and_backward(state):
    """The kernels of a chain whose arrays outgrow one layer's (timed on several sets of
    arrays in turn, as a step reads them) run forward then backward with each optimizer;
    one timing per distinct local shape, none missing, none extra."""
    from aluminum.executor.sharding import profile
    chain = [Layer(96, 48, 48, True, None, state) for _ in range(6)] + \
        [Layer(96, 48, 8, False, None, state)]
    strategies = [((1, 1), (1, 1)), ((2, 1), (1, 1)), ((1, 1), (1, 2)), ((1, 2), (2, 1))]
    timed = profile.layer_times(chain, strategies)
    shapes = {(-(-layer.batch // m), -(-layer.inputs // k), -(-layer.outputs // n),
               layer.act, state) for layer in chain for (m, k), (_, n) in strategies}
    assert sorted(key for key, _, _ in timed) == sorted(shapes)
    assert all(forward > 0 and backward > 0 for _, forward, backward in timed)
