"""AUTO_PARALLEL's first piece: choosing the fc layers' strategies of an MLP by cost.

A chain of fc layers (``matmul`` + bias + activation each) is costed per layer (node) and
per pair of neighbours (edge), the way the pass (program_pass.py) would lay it out:

- node(layer, strategy): the matmuls' FLOPs (forward and both gradients) over the ranks
  that split them, at ``CostModel.flops``; summing a Partial output before the bias; the
  gradient redistributions of the weight, the bias and the input (data parallelism's and
  Megatron's allreduces);
- edge(strategy, next strategy): the redistribution from one layer's output layout to the
  next one's input layout, and its gradient's route back.

Communication is the α-β model: α per collective step of the planner's route plus β per
byte the busiest rank receives (``plan_redistribution``).  The search is dynamic
programming over the chain (MindSpore's elimination of a linear cost graph: a chain
contracts to one edge), with consecutive identical layers tied to one decision;
``brute_force`` enumerates the same costs, to check it.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

from ..layouts import Layout, plan_redistribution
from .strategy import OpSharding, Signature, from_strategy

MATMUL = Signature({"X": ["mk"], "Y": ["kn"]}, {"Out": ["mn"]})


@dataclass(frozen=True)
class CostModel:
    """Seconds per message (``alpha``), per byte received (``beta``), FLOP/s (``flops``);
    defaults of the order of this machine's shared-memory ranks and one core's numpy."""

    alpha: float = 2e-5
    beta: float = 5e-10
    flops: float = 2e9
    itemsize: int = 8


@dataclass(frozen=True)
class Layer:
    """``batch`` × ``inputs`` @ ``inputs`` × ``outputs``."""

    batch: int
    inputs: int
    outputs: int


def candidates(nranks: int) -> list[tuple]:
    """Every matmul strategy using all ``nranks`` ranks on a 1-D or 2-D mesh, and none."""
    found = [((1, 1), (1, 1))]
    for m, k, n in itertools.product(range(1, nranks + 1), repeat=3):
        if m * k * n == nranks and sum(x > 1 for x in (m, k, n)) <= 2:
            found.append(((m, k), (k, n)))
    return found


def _sharding(strategy, nranks) -> OpSharding:
    return from_strategy("search", MATMUL, strategy, nranks)


def _comm_time(src: Layout, dst: Layout, shape, model: CostModel) -> float:
    if src == dst:
        return 0.0
    plan = plan_redistribution(src, dst, shape, f"float{model.itemsize * 8}")
    busiest = max((plan.bytes_received(r) for r in range(src.mesh.size)), default=0)
    return model.alpha * len(plan.collectives) + model.beta * busiest


class ChainCost:
    """Node and edge costs of a chain of ``layers`` on ``nranks`` ranks (cached)."""

    def __init__(self, layers, nranks: int, model: CostModel = CostModel()) -> None:
        self.layers, self.nranks, self.model = list(layers), nranks, model
        self.strategies = candidates(nranks)
        self.node = lru_cache(maxsize=None)(self._node)
        self.edge = lru_cache(maxsize=None)(self._edge)

    def _node(self, layer: Layer, s: int) -> float:
        sharding, model = _sharding(self.strategies[s], self.nranks), self.model
        m, k = self.strategies[s][0]
        n = self.strategies[s][1][1]
        flops = 3 * 2 * layer.batch * layer.inputs * layer.outputs / (m * k * n)
        out = sharding.layout("mn", output=True)
        shape_out = (layer.batch, layer.outputs)
        time = flops / model.flops + _comm_time(out, out.for_gradient(), shape_out, model)
        for dims, shape in (("kn", (layer.inputs, layer.outputs)),
                            ("n", (layer.outputs,)), ("mk", (layer.batch, layer.inputs))):
            wanted = Layout(sharding.mesh, sharding.layout(dims).placements)
            time += _comm_time(sharding.gradient_layout(dims), wanted, shape, model)
        return time

    def _edge(self, before: Layer, s: int, after: Layer, t: int) -> float:
        out = _sharding(self.strategies[s], self.nranks).layout("mn", output=True)
        out = out.for_gradient()
        wanted = _sharding(self.strategies[t], self.nranks).layout("mk")
        shape = (before.batch, before.outputs)
        return _comm_time(out, wanted, shape, self.model) + \
            _comm_time(wanted, out, shape, self.model)

    def total(self, choice) -> float:
        """The cost of one strategy index per layer."""
        cost = sum(self.node(layer, s) for layer, s in zip(self.layers, choice))
        return cost + sum(self.edge(a, s, b, t) for a, b, s, t in zip(
            self.layers, self.layers[1:], choice, choice[1:]))


def groups(layers, tie: bool) -> list[list[int]]:
    """Runs of consecutive identical layers (tied to one decision), or one per layer."""
    runs: list[list[int]] = []
    for i, layer in enumerate(layers):
        if tie and runs and layers[runs[-1][-1]] == layer:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def search(layers, nranks: int, model: CostModel = CostModel(), tie: bool = True):
    """The cheapest strategy per layer and its cost: dynamic programming over the chain of
    groups (``groups``), each group's cost its layers' nodes and inner edges."""
    cost = ChainCost(layers, nranks, model)
    runs = groups(cost.layers, tie)
    options = range(len(cost.strategies))

    def inner(run, s):
        layer = cost.layers[run[0]]
        return len(run) * cost.node(layer, s) + (len(run) - 1) * cost.edge(layer, s, layer, s)

    best = {s: (inner(runs[0], s), (s,)) for s in options}
    for previous, run in zip(runs, runs[1:]):
        a, b = cost.layers[previous[-1]], cost.layers[run[0]]
        best = {t: min(((value + cost.edge(a, s, b, t) + inner(run, t), path + (t,))
                        for s, (value, path) in best.items()), key=lambda x: x[0])
                for t in options}
    value, path = min(best.values(), key=lambda x: x[0])
    choice = [s for run, s in zip(runs, path) for _ in run]
    return [cost.strategies[s] for s in choice], value


def brute_force(layers, nranks: int, model: CostModel = CostModel(), tie: bool = True):
    """``search``'s answer by enumerating every choice (small models only)."""
    cost = ChainCost(layers, nranks, model)
    runs = groups(cost.layers, tie)
    best = (math.inf, None)
    for pick in itertools.product(range(len(cost.strategies)), repeat=len(runs)):
        choice = [s for run, s in zip(runs, pick) for _ in run]
        best = min(best, (cost.total(choice), choice), key=lambda x: x[0])
    return [cost.strategies[s] for s in best[1]], best[0]
