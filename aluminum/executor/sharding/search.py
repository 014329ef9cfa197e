"""AUTO_PARALLEL's search: choosing the fc layers' strategies of an MLP by cost.

A chain of fc layers (``matmul`` + bias + activation each) is costed per layer (node) and
per pair of neighbours (edge), the way the pass (program_pass.py) would lay it out:

- node(layer, strategy): the matmuls' FLOPs (forward, the weight's gradient and, except
  for the first layer, whose input is data, the input's gradient) over the ranks that split
  them, at ``CostModel.flops``; the element-wise ops' bytes (bias, activation, their
  gradients, the SGD update) at ``CostModel.bandwidth``; ``CostModel.op`` times
  ``op_scale`` per op the executor runs; summing a Partial output before the bias; the
  gradient redistributions of the weight, the bias and (not for the first layer) the
  input: data parallelism's and Megatron's allreduces;
- edge(strategy, next strategy): the redistribution from one layer's output layout to the
  next one's input layout, and its gradient's route back, less the overlap of the later
  layer's parameter-gradient reductions with the earlier layer's gradient computation
  (the executor runs them on its communication stream meanwhile), where ranks have cores
  to spare for it (``CostModel.overlap``).

Measured kernel and step times (profile.py, ``calibrate.program_model``) replace the rates
where the model has them.

Communication is the α-β model: α (+ the software's own cost per collective step:
``call`` on the critical path, ``reduction_call`` for a parameter-gradient reduction, which
the executor runs on its communication stream) per collective step of the planner's route
plus β per byte the busiest rank receives (``plan_redistribution``).  Memory per rank
(``Estimate.memory``) is parameters + gradients + optimizer state + the forward's
activations (every forward tensor's part on the rank holding the largest, redistributed
copies included): it adds up over nodes and edges.

The search is dynamic programming over the chain (MindSpore's elimination of a linear cost
graph: a chain contracts to one edge), with a run of consecutive identical layers tied to
one decision: a pair of strategies its layers take in turn (so Megatron's column-parallel,
row-parallel alternation is one decision, as one repeated block is in MindSpore).  Under a
memory bound the state is (last strategy, memory) and each state keeps its Pareto front of
(time, memory); ``brute_force`` enumerates the same costs, to check it.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

from ..errors import ProgramError
from ..layouts import Layout, plan_redistribution
from .profile import layer_key, tail_key
from .program_pass import equivalent, sums_over_every_rank
from .strategy import OpSharding, Signature, from_strategy

MATMUL = Signature({"X": ["mk"], "Y": ["kn"]}, {"Out": ["mn"]})


@dataclass(frozen=True)
class CostModel:
    """``alpha``: seconds per collective step, ``beta``: seconds per byte the busiest rank
    receives (both from the tuner's α-β fit, ``python -m aluminum.bench model``, in
    ``machine_model()``); ``flops``: matmul FLOP/s; ``bandwidth``: bytes/s of element-wise
    ops (inf: not counted); ``op``: seconds per op the executor runs; ``call``: seconds
    per collective step beyond α (Python, the planner, the sub-communicator, waiting for
    the slowest rank) on the critical path -- a Partial output's sum, an edge's
    redistribution and its gradient, an input gradient's reduction, the split loss's sum;
    ``reduction_call``: the same for a parameter-gradient reduction (weight, bias), which
    the executor runs on its communication stream while later gradients compute, so it
    costs less than ``call`` (and is partly hidden, ``ChainCost.edge``);
    ``activation``: seconds per element of tanh (transcendental: not bandwidth-bound);
    ``itemsize``: bytes per element; ``compute_scale``: how much slower kernels run inside
    a training step than measured alone (ranks and their communication sharing cores);
    ``op_scale``: how much longer the executor takes per op of a training step than per
    op of the calibration's chain of tiny ones (``op``; fitted, as ``compute_scale`` is);
    ``overlap``: the share of a layer's parameter-gradient reductions that runs under the
    earlier layer's gradient computation where that takes longer -- 1 where every rank has
    a core to spare for the executor's communication thread, 0 where it has not (the
    thread then takes turns with the computation on the rank's core, and hides nothing).
    The defaults are guesses of this machine's order; ``calibrate.machine_model`` measures
    them (``call``, ``reduction_call``, ``bucket_call``, ``compute_scale`` and
    ``op_scale`` fitted to whole training steps).

    ``buckets``: ``(first_mb, cap_mb)`` where the parameter gradients summed over every
    rank are fused into buckets (``BuildStrategy(fuse_all_reduce_ops=True)``'s
    ``first_bucket_mb`` and ``fuse_grad_size_mb``; None: each summed by its own op).  A
    fused gradient pays β per byte and its share, by bytes, of the op, α and
    ``bucket_call`` of the buckets all the chain's parameters would fill (so pure data
    parallelism pays for its buckets exactly, a mix of strategies for a share of them);
    ``bucket_call``: seconds per fused bucket beyond α (fitted like ``reduction_call``).

    Measured costs replace the rates where present (profile.py): ``steps``, ``((kind,
    group, alpha, beta), ...)`` per collective step kind and line length; ``kernels``,
    ``((layer_key, forward, backward), ...)``, seconds of a layer's kernels at its local
    shapes."""

    alpha: float = 2e-5
    beta: float = 5e-10
    flops: float = 2e9
    itemsize: int = 8
    bandwidth: float = math.inf
    op: float = 0.0
    call: float = 0.0
    reduction_call: float = 0.0
    activation: float = 0.0
    compute_scale: float = 1.0
    op_scale: float = 1.0
    overlap: float = 1.0
    buckets: tuple | None = None
    bucket_call: float = 0.0
    steps: tuple = ()
    kernels: tuple = ()
    tail: tuple = ()

    @cached_property
    def _steps(self) -> dict:
        return {(kind, group): (alpha, beta) for kind, group, alpha, beta in self.steps}

    @cached_property
    def _kernels(self) -> dict:
        return {tuple(key): (forward, backward) for key, forward, backward in self.kernels}

    @cached_property
    def _tail(self) -> dict:
        return {tuple(key): (seconds, ops) for key, seconds, ops in self.tail}

    def step_time(self, step, busiest: int, reduction: bool = False) -> float:
        """Seconds of one redistribution ``step`` whose busiest rank receives ``busiest``
        bytes: its measured kind and line length, else α + call + β per byte (an exchange
        is costed as an all-to-all over its whole mesh; a slice or pad as a copy);
        ``reduction``: a parameter gradient's (``reduction_call`` instead of ``call``)."""
        if step.kind in ("slice", "pad"):
            return busiest / self.bandwidth
        group = step.src.mesh.size
        if step.mesh_dim is not None:
            group = step.src.mesh.shape[step.mesh_dim]
        return self.collective_time(step.kind, group, busiest, reduction)

    def collective_time(self, kind: str, group: int, busiest: int,
                        reduction: bool = False, bucket: bool = False) -> float:
        """Seconds of one collective step of ``kind`` on a line of ``group`` ranks
        (``reduction``: a parameter gradient's, off the critical path; ``bucket``: a
        bucket of them fused; ``sum``: the data-parallel ``allreduce`` op over every rank,
        as the pass sums gradients)."""
        call = self.bucket_call if bucket else self.reduction_call if reduction else \
            self.call
        measured = self._steps.get(("alltoall" if kind == "exchange" else kind, group))
        if measured is None and kind == "sum":    # (not measured: priced as a redistribution's)
            measured = self._steps.get(("allreduce", group))
        if measured is None:
            return self.alpha + call + self.beta * busiest
        alpha, beta = measured
        return alpha + call + beta * busiest

    def tail_time(self, key: tuple) -> tuple[float, int] | None:
        """The measured seconds of the loss's kernels on a part of the last layer's output
        (``profile.tail_key``) and the ops the executor runs for them, or None."""
        return self._tail.get(key)

    def kernel_time(self, key: tuple) -> tuple[float, float] | None:
        """The measured seconds of a layer's forward and backward kernels
        (``profile.layer_key``), or None."""
        return self._kernels.get(key)


@dataclass(frozen=True)
class Layer:
    """``batch`` × ``inputs`` @ ``inputs`` × ``outputs``, then a bias and (``act``) an
    activation; ``fixed``: a strategy set by hand, the only one the search may give it;
    ``state``: the optimizer's arrays per parameter (SGD 0, Momentum 1, Adam 2)."""

    batch: int
    inputs: int
    outputs: int
    act: bool = True
    fixed: tuple | None = None
    state: int = 0


@dataclass(frozen=True)
class Estimate:
    """Predicted seconds per training step, bytes per rank (the largest), bytes moved per
    step (summed over ranks), collective steps per step (a fused gradient sum counts its
    share of its buckets); ``backward``: seconds of gradient computation; ``reduction``:
    seconds of parameter-gradient reductions that can run while the layer before computes
    its gradients (``ChainCost.edge``; each counted in ``time`` too; of fused sums, all
    but the last bucket's share); ``reductions``: how many of the collective steps are
    parameter-gradient reductions (costed with ``reduction_call``, not ``call``)."""

    time: float = 0.0
    memory: float = 0.0
    moved: float = 0.0
    collectives: float = 0
    backward: float = 0.0
    reduction: float = 0.0
    reductions: float = 0

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(self.time + other.time, self.memory + other.memory,
                        self.moved + other.moved, self.collectives + other.collectives,
                        self.backward + other.backward, self.reduction + other.reduction,
                        self.reductions + other.reductions)

    def __mul__(self, count: int) -> Estimate:
        if count == 0:
            return Estimate()
        return Estimate(self.time * count, self.memory * count, self.moved * count,
                        self.collectives * count, self.backward * count,
                        self.reduction * count, self.reductions * count)


def candidates(nranks: int) -> list[tuple]:
    """Every matmul strategy using all ``nranks`` ranks on a 1-D or 2-D mesh, and none."""
    found = [((1, 1), (1, 1))]
    for m, k, n in itertools.product(range(1, nranks + 1), repeat=3):
        if m * k * n == nranks and sum(x > 1 for x in (m, k, n)) <= 2:
            found.append(((m, k), (k, n)))
    return found


def data_parallel(nranks: int) -> tuple:
    return ((nranks, 1), (1, 1))


def model_parallel(depth: int, nranks: int) -> list[tuple]:
    """Megatron's pure model parallelism: column-parallel, row-parallel, alternating."""
    return [((1, 1), (1, nranks)) if i % 2 == 0 else ((1, nranks), (nranks, 1))
            for i in range(depth)]


def _sharding(strategy, nranks) -> OpSharding:
    return from_strategy("search", MATMUL, strategy, nranks)


def _largest(layout: Layout, shape) -> int:
    return max(math.prod(layout.local_shape(r, shape)) for r in layout.mesh.ranks)


def _redistribution(src: Layout, dst: Layout, shape, model: CostModel,
                    copy: bool = True, reduction: bool = False,
                    gradient: bool = False, share: float | None = None) -> Estimate:
    """One redistribute op from ``src`` to ``dst``; ``copy``: its output is kept (memory);
    ``reduction``: a parameter gradient's (off the critical path: ``reduction_call``);
    ``gradient``: a gradient the pass sums, where it sums over every rank, with the
    data-parallel ``allreduce`` op (step kind ``sum``); ``share``: the buckets that sum
    pays for where the sums are fused (``CostModel.buckets``), None: an op of its own."""
    if equivalent(src, dst, shape, src.mesh.size):
        return Estimate()
    plan = plan_redistribution(src, dst, shape, f"float{model.itemsize * 8}")
    steps = len(plan.collectives)
    if gradient and sums_over_every_rank(src, dst, src.mesh.size):
        busiest = max(plan.bytes_received(rank) for rank in src.mesh.ranks)
        group = src.mesh.size
        if share is None:
            time = model.op + model.collective_time("sum", group, busiest, reduction)
        else:     # its bytes, and its share of the buckets' op, α and call
            time = model.collective_time("sum", group, busiest) - \
                model.collective_time("sum", group, 0) + \
                share * (model.op + model.collective_time("sum", group, 0, bucket=True))
            steps = share
    else:
        time = model.op + sum(model.step_time(step, max(step.received.values(), default=0),
                                              reduction) for step in plan.steps)
    memory = _largest(dst, shape) * model.itemsize if copy else 0
    return Estimate(time, memory, plan.bytes, steps)


class ChainCost:
    """Node and edge costs of a chain of ``layers`` on ``nranks`` ranks (cached)."""

    def __init__(self, layers, nranks: int, model: CostModel = CostModel()) -> None:
        self.layers, self.nranks, self.model = list(layers), nranks, model
        self.strategies = candidates(nranks)
        for layer in self.layers:
            if layer.fixed is not None and layer.fixed not in self.strategies:
                self.strategies.append(layer.fixed)
        self.bucket_share = None            # buckets per byte of fused gradient sums
        self.hides = 1.0      # the share of a parameter-gradient sum that can hide
        if model.buckets is not None:
            first, cap = (mb * 2**20 for mb in model.buckets)
            parameters = model.itemsize * sum(l.inputs * l.outputs + l.outputs
                                              for l in self.layers)
            filled = 1 + max(0, math.ceil((parameters - first) / cap))
            self.bucket_share = filled / parameters
            # a bucket starts once its last gradient is computed: the last one to fill
            # (holding the first layers' gradients) has no computation left to hide under
            self.hides = (filled - 1) / filled
        self.node = lru_cache(maxsize=None)(self._node)
        self.edge = lru_cache(maxsize=None)(self._edge)
        self.tail = lru_cache(maxsize=None)(self._tail)

    def _node(self, layer: Layer, s: int, first: bool = False) -> Estimate:
        strategy = self.strategies[s]
        if layer.fixed is not None and strategy != layer.fixed:
            return Estimate(math.inf, math.inf)
        sharding, model = _sharding(strategy, self.nranks), self.model
        (m, k), (_, n) = strategy
        matmuls = 2 if first else 3
        flops = matmuls * 2 * layer.batch * layer.inputs * layer.outputs / (m * k * n)
        out = sharding.layout("mn", output=True)
        shape_out = (layer.batch, layer.outputs)
        whole = out.for_gradient()
        part = _largest(whole, shape_out)
        weight = _largest(sharding.layout("kn"), (layer.inputs, layer.outputs))
        bias = _largest(sharding.layout("n"), (layer.outputs,))
        elementwise = (10 if layer.act else 5) * part + 3 * (weight + bias)
        ops = (2 + layer.act) * 2 + 2                     # forward, gradients, 2 SGD
        activations = _largest(out, shape_out) + (1 + layer.act) * part
        if first:
            activations += _largest(sharding.layout("mk"), (layer.batch, layer.inputs))
        measured = model.kernel_time(layer_key(layer, strategy))
        if measured is None:     # a third forward (one matmul of three), the rest backward
            compute = flops / model.flops + elementwise * model.itemsize / \
                model.bandwidth + layer.act * part * model.activation
            measured = (compute / 3, compute * 2 / 3)
        scale, op = model.compute_scale, model.op_scale * model.op
        forward = scale * measured[0] + (2 + layer.act) * op
        backward = scale * measured[1] + (ops - 2 - layer.act) * op
        estimate = Estimate(forward + backward,
                            ((2 + layer.state) * (weight + bias) + activations) * model.itemsize,
                            backward=backward)
        estimate += _redistribution(out, whole, shape_out, model)     # a Partial output
        # the bias is added to the output once its Partial sum is resolved: its gradient
        # is a sum of parts only along the batch split, not the inner one
        resolved = OpSharding(sharding.mesh, tuple(None if letter == "k" else letter
                                                   for letter in sharding.letters))
        grads = [("kn", (layer.inputs, layer.outputs), sharding),
                 ("n", (layer.outputs,), resolved)]
        if not first:                                 # data needs no input gradient
            grads.append(("mk", (layer.batch, layer.inputs), sharding))
        for dims, shape, by in grads:
            wanted = Layout(sharding.mesh, sharding.layout(dims).placements)
            parameter = dims != "mk"
            share = None if not parameter or self.bucket_share is None else \
                math.prod(shape) * model.itemsize * self.bucket_share
            moved = _redistribution(by.gradient_layout(dims), wanted, shape, model,
                                    copy=False, reduction=parameter, gradient=True,
                                    share=share)
            if parameter:
                hides = 1.0 if share is None else self.hides
                moved += Estimate(reduction=hides * moved.time, reductions=moved.collectives)
            estimate += moved
        return estimate

    def _edge(self, before: Layer, s: int, after: Layer, t: int) -> Estimate:
        """The redistributions between two layers, less the part of the later layer's
        gradient reductions that runs while the earlier one computes its gradients
        (``CostModel.overlap``)."""
        out = _sharding(self.strategies[s], self.nranks).layout("mn", output=True)
        out = out.for_gradient()
        wanted = _sharding(self.strategies[t], self.nranks).layout("mk")
        shape = (before.batch, before.outputs)
        hidden = self.model.overlap * min(self.node(after, t).reduction,
                                          self.node(before, s).backward)
        return _redistribution(out, wanted, shape, self.model) + \
            _redistribution(wanted, out, shape, self.model, copy=False) + \
            Estimate(time=-hidden)

    def _tail(self, last: Layer, s: int) -> Estimate:
        """The loss after the last layer: its measured kernels and ops (nothing without a
        measurement), and the sum of a loss computed from a split output (a Partial scalar
        made whole by the planner's route, as the pass does: one allreduce on a line, a
        reduce-scatter per mesh dimension and a bcast on a 2-D mesh)."""
        # a scalar of the output: summands along the letters that split the output
        summands = _sharding(self.strategies[s], self.nranks).layout(
            "", output=True, resolved=frozenset("k"))
        loss = _redistribution(summands, summands.for_gradient(), (1,), self.model,
                               copy=False)
        measured = self.model.tail_time(tail_key(last, self.strategies[s]))
        if measured is not None:
            seconds, ops = measured
            loss += Estimate(self.model.compute_scale * seconds +
                             ops * self.model.op_scale * self.model.op)
        return loss

    def estimate(self, choice) -> Estimate:
        """Time, memory and bytes of one strategy index per layer."""
        total = self.tail(self.layers[-1], choice[-1]) if choice else Estimate()
        for i, (layer, s) in enumerate(zip(self.layers, choice)):
            total += self.node(layer, s, i == 0)
        for a, b, s, t in zip(self.layers, self.layers[1:], choice, choice[1:]):
            total += self.edge(a, s, b, t)
        return total

    def total(self, choice) -> float:
        """The time of one strategy index per layer."""
        return self.estimate(choice).time


def groups(layers, tie: bool) -> list[list[int]]:
    """Runs of consecutive identical layers (tied to one decision), or one per layer."""
    runs: list[list[int]] = []
    for i, layer in enumerate(layers):
        if tie and runs and layers[runs[-1][-1]] == layer:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def patterns(run: list[int], count: int) -> list[tuple[int, ...]]:
    """The decisions of a run of tied layers: the strategy of a lone layer, or the pair of
    strategies a longer run's layers take in turn (the k-th layer ``pattern[k % 2]``)."""
    if len(run) == 1:
        return [(s,) for s in range(count)]
    return list(itertools.product(range(count), repeat=2))


def _expand(runs, picks) -> list[int]:
    """One strategy index per layer from one pattern per run."""
    return [pattern[k % len(pattern)] for run, pattern in zip(runs, picks)
            for k in range(len(run))]


def _pareto(options):
    """The (time, memory, path) options no other beats in both time and memory."""
    front, least = [], math.inf
    for option in sorted(options, key=lambda o: (o[0], o[1])):
        if option[1] < least:
            front.append(option)
            least = option[1]
    return front


def _bound_error(cost: ChainCost, runs, max_memory: float) -> ProgramError:
    least = sum(min(sum(cost.node(cost.layers[i], s, i == 0).memory for i in run)
                    for s in range(len(cost.strategies))) for run in runs)
    return ProgramError(f"max_memory_mb: no strategy of the {len(cost.layers)} fc layers fits "
                        f"{max_memory / 2**20:.6g} MB per rank; the least any needs is about "
                        f"{least / 2**20:.6g} MB (parameters, gradients, activations)")


def search(layers, nranks: int, model: CostModel = CostModel(), tie: bool = True,
           max_memory: float | None = None):
    """The cheapest strategy per layer and its time: dynamic programming over the chain of
    groups (``groups``), each group's cost its layers' nodes and inner edges; with
    ``max_memory`` (bytes per rank), the cheapest whose memory estimate fits (a Pareto
    front per state); ``ProgramError`` if none does."""
    cost = ChainCost(layers, nranks, model)
    runs = groups(cost.layers, tie)
    count = len(cost.strategies)

    def inner(run, pattern):
        """The run's nodes and the edges inside it, its layers taking ``pattern`` in turn."""
        layer = cost.layers[run[0]]
        picks = [pattern[k % len(pattern)] for k in range(len(run))]
        total = cost.node(layer, picks[0], run[0] == 0)
        for s, t in zip(picks, picks[1:]):
            total = total + cost.node(layer, t) + cost.edge(layer, s, layer, t)
        return total

    def last(run, pattern) -> int:
        return pattern[(len(run) - 1) % len(pattern)]

    def final(pattern) -> float:
        """The loss's cost after the last run taking ``pattern``."""
        return cost.tail(cost.layers[-1], last(runs[-1], pattern)).time

    if max_memory is None:
        best = {p: (inner(runs[0], p).time, (p,)) for p in patterns(runs[0], count)}
        for previous, run in zip(runs, runs[1:]):
            a, b = cost.layers[previous[-1]], cost.layers[run[0]]
            best = {q: min(((value + cost.edge(a, last(previous, path[-1]), b, q[0]).time
                             + inner(run, q).time, path + (q,))
                            for value, path in best.values()), key=lambda x: x[0])
                    for q in patterns(run, count)}
        value, path = min(((value + final(path[-1]), path) for value, path in best.values()),
                          key=lambda x: x[0])
    else:
        fronts = {}
        for p in patterns(runs[0], count):
            first = inner(runs[0], p)
            fronts[p] = [(first.time, first.memory, (p,))] if first.memory <= max_memory \
                else []
        for previous, run in zip(runs, runs[1:]):
            a, b = cost.layers[previous[-1]], cost.layers[run[0]]
            new = {}
            for q in patterns(run, count):
                own = inner(run, q)
                found = []
                for p, front in fronts.items():
                    step = own + cost.edge(a, last(previous, p), b, q[0])
                    found += [(value + step.time, memory + step.memory, path + (q,))
                              for value, memory, path in front
                              if memory + step.memory <= max_memory]
                new[q] = _pareto(found)
            fronts = new
        every = [(value + final(path[-1]), memory, path)
                 for front in fronts.values() for value, memory, path in front]
        if not every or math.isinf(min(o[0] for o in every)):
            raise _bound_error(cost, runs, max_memory)
        value, _, path = min(every, key=lambda x: x[0])
    return [cost.strategies[s] for s in _expand(runs, path)], value


def brute_force(layers, nranks: int, model: CostModel = CostModel(), tie: bool = True,
                max_memory: float | None = None):
    """``search``'s answer by enumerating every choice (small models only)."""
    cost = ChainCost(layers, nranks, model)
    runs = groups(cost.layers, tie)
    best = (math.inf, None)
    for picks in itertools.product(*(patterns(run, len(cost.strategies)) for run in runs)):
        choice = _expand(runs, picks)
        estimate = cost.estimate(choice)
        if max_memory is not None and estimate.memory > max_memory:
            continue
        best = min(best, (estimate.time, choice), key=lambda x: x[0])
    if best[1] is None:
        raise _bound_error(cost, runs, max_memory)
    return [cost.strategies[s] for s in best[1]], best[0]


def estimate(layers, nranks: int, strategies, model: CostModel = CostModel()) -> Estimate:
    """The model's time, memory and bytes for given strategies (one per layer)."""
    cost = ChainCost([Layer(l.batch, l.inputs, l.outputs, l.act, None, l.state)
                      for l in layers], nranks, model)
    for strategy in strategies:
        if strategy not in cost.strategies:
            cost.strategies.append(tuple(strategy))
    return cost.estimate([cost.strategies.index(tuple(s)) for s in strategies])
