"""The strategy search (sharding/search.py): dynamic programming equals brute force on
every small chain here, is fast on deep ones, and picks what the costs say it should."""
import time

import numpy as np
import pytest

from aluminum.executor.sharding.search import CostModel, Layer, brute_force, search

RNG = np.random.default_rng(5)
SMALL = [[Layer(16, int(a), int(b)) for a, b in zip(w, w[1:])]
         for w in [RNG.integers(4, 300, size=n + 1) for n in range(1, 6)]] + [
    [Layer(32, 64, 64)] * 6, [Layer(8, 512, 512)] * 3 + [Layer(8, 512, 10)]]


@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("index", range(len(SMALL)))
@pytest.mark.parametrize("tie", [True, False])
def test_the_search_equals_brute_force(nranks, index, tie):
    chain = SMALL[index]
    if not tie and len(chain) > 5 and nranks == 4:
        chain = chain[:5]     # 7**5 choices: brute force stays under a second
    found, cost = search(chain, nranks, tie=tie)
    expected, best = brute_force(chain, nranks, tie=tie)
    assert cost == pytest.approx(best, rel=1e-12)
    assert found == expected or cost == pytest.approx(best, rel=1e-12)


def test_tied_layers_take_one_decision_a_pair_in_turn():
    found, _ = search([Layer(16, 64, 64)] * 5 + [Layer(16, 64, 3)], 4)
    assert found[0] == found[2] == found[4] and found[1] == found[3]


def test_wide_tied_layers_alternate_column_and_row_parallel():
    """Megatron's MLP: column-parallel (weights split by columns), then row-parallel (by
    rows, the input already split), in turn; tying identical layers must not exclude it.
    At 20 GFLOP/s the weights' allreduces of data parallelism cost more than the layer
    before computes its gradients in, so Megatron's alternation is the optimum."""
    chain, model = [Layer(16, 1024, 1024)] * 4, CostModel(flops=2e10)
    tied, tied_cost = search(chain, 4, model)
    untied, untied_cost = search(chain, 4, model, tie=False)
    assert tied_cost == pytest.approx(untied_cost, rel=1e-12)
    assert [str(s) for s in tied] == ["((1, 1), (1, 4))", "((1, 4), (4, 1))"] * 2


@pytest.mark.parametrize("depth, untied_limit, tied_limit", [(64, 1.0, 1.0), (256, 5.0, 5.0)])
def test_deep_chains_are_searched_fast(depth, untied_limit, tied_limit):
    widths = [Layer(64, 256, 256)] * depth
    start = time.perf_counter()
    search(widths, 4, tie=False)
    assert time.perf_counter() - start < untied_limit
    start = time.perf_counter()
    search(widths, 4)
    assert time.perf_counter() - start < tied_limit


def test_deep_narrow_is_data_parallel_and_wide_is_model_parallel():
    deep, _ = search([Layer(256, 16, 16)] * 32, 4)
    assert set(deep) == {((4, 1), (1, 1))}
    wide, _ = search([Layer(8, 4096, 4096)] * 4, 4)
    assert all(s[1] != (1, 1) for s in wide), wide    # the weight is split
