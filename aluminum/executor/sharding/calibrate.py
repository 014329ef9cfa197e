"""The search's cost model measured on this machine, cached as the tuner caches its table.

``machine_model(comm, itemsize)`` returns a ``CostModel`` whose

- ``alpha``, ``beta`` are the α-β model of the tuning table in use (``python -m
  aluminum.bench tune`` fits them to a ping-pong; ``python -m aluminum.bench model`` prints
  what they predict), else the selector's defaults -- read each time, never cached here;
- ``flops`` (a 256 × 256 by 256 × 128 matmul), ``bandwidth`` (a 16 MiB element-wise add:
  three arrays' bytes), ``activation`` (tanh, per element) and ``op`` (the
  ParallelExecutor's time per op, from a chain of tiny ops) are measured alone;
- ``steps``: each redistribution step kind's α and β on lines of every length
  (``profile.step_times``);
- ``compute_scale``, ``op_scale``, ``call``, ``reduction_call`` and ``bucket_call`` are
  fitted to whole training steps of nineteen MLPs (``fit_training_steps``): how much
  slower kernels run inside a step, how much longer the executor takes per op there than
  per op of the tiny chain, what each collective on the critical path costs beyond its α
  there, what each parameter-gradient reduction (run on the communication stream,
  overlapped) does, and what each bucket of them fused does;
- ``overlap``: whether a gradient reduction can run under computation (where the executor
  runs a second thread, ``default_threads``; not measured, not cached);

all in a few seconds on every rank at once (so under the load the job itself makes)
and averaged over the ranks; rank 0 keeps them in ``$AL_AUTO_PARALLEL_FILE``, else
``auto_parallel.json`` next to the tuner's table (``$XDG_CACHE_HOME/aluminum/``), one entry
per rank count and item size.  Rank 0 decides whether the cache is used and broadcasts the
rates, so every rank searches with the same numbers and picks the same strategies.
``program_model(program, comm)`` adds the program's own layer and loss kernels.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import time
from pathlib import Path

import numpy as np

import aluminum as al

from . import profile
from .search import CostModel

RATES = ("flops", "bandwidth", "op", "call", "activation", "compute_scale", "op_scale",
         "reduction_call", "bucket_call")


def cache_path() -> Path:
    return Path(os.environ.get("AL_AUTO_PARALLEL_FILE") or
                al.tuning.user_table_path().with_name("auto_parallel.json"))


def alpha_beta() -> "al.tuning.AlphaBeta":
    """The tuning table's α, β (what ``python -m aluminum.bench model`` uses)."""
    return al.tuning.current_table().model or al.tuning.AlphaBeta(al.tuning.DEFAULT_ALPHA,
                                                                  al.tuning.DEFAULT_BETA)


def _overlap(comm) -> float:
    """``CostModel.overlap``: 1 where the ParallelExecutor runs a second thread, on which a
    gradient reduction overlaps the computation, else 0 (``default_threads``)."""
    from ..parallel_executor import default_threads
    return 1.0 if default_threads(comm) > 1 else 0.0


def _best(fn, repeats: int) -> float:
    return min(profile.run_times(fn, repeats))


def _median(fn, repeats: int) -> float:
    return float(np.median(profile.run_times(fn, repeats)))


def measure(comm=None, itemsize: int = 8, alpha: float = 0.0) -> dict:
    """This rank's rates (module docstring); ``comm``: None or one rank measures no call."""
    from .. import layers
    from ..ir import Program, program_guard
    from ..parallel_context import swapped_context
    from ..parallel_executor import ParallelExecutor
    from ..scope import Scope

    dtype = {8: np.float64, 4: np.float32, 2: np.float16}[itemsize]
    a = np.random.default_rng(0).random((256, 256)).astype(dtype)
    b = a[:, :128].copy()
    flops = 2 * 256 * 256 * 128 / _best(lambda: a @ b, 5)
    x = np.ones((1 << 24) // itemsize, dtype)
    y = np.empty_like(x)
    bandwidth = 3 * x.nbytes / _best(lambda: np.add(x, x, out=y), 5)
    activation = _best(lambda: np.tanh(x[:1 << 18], out=y[:1 << 18]), 5) / (1 << 18)

    from .. import ir
    names, ir._names = ir._names, itertools.count()   # leave the user's names as they were
    try:
        main, startup = Program(), Program()
        with program_guard(main, startup):
            h = layers.data("calibrate_x", (1, 1), "float64", append_batch_size=False)
            for _ in range(64):
                h = layers.scale(h, 1.0)
    finally:
        ir._names = names
    with swapped_context():
        pe = ParallelExecutor(main, scope=Scope())
        feed = {"calibrate_x": np.ones((1, 1))}
        op = _median(lambda: pe.run([h.name], feed), 15) / 64
        pe.close()

    return {"flops": flops, "bandwidth": bandwidth, "op": op, "activation": activation,
            **dict(zip(FITTED, _START))}


def _read_cache(key: str, steps: int) -> dict | None:
    """The cached rates and ``steps`` step costs under ``key``, or None."""
    try:
        entry = json.loads(cache_path().read_text(encoding="utf-8"))[key]
        found = {name: float(entry[name]) for name in RATES}
        found["steps"] = np.array(entry["steps"], np.float64).reshape(steps, 2)
        return found
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(key: str, rates: dict) -> None:
    path = cache_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[key] = {**rates, "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def machine_model(comm=None, itemsize: int = 8, refresh: bool = False) -> CostModel:
    """The cost model of this machine for ``comm``'s ranks (module docstring); collective
    over ``comm``.  ``refresh``: measure again even if cached."""
    ab = alpha_beta()
    size = 1 if comm is None else comm.size
    key = f"ranks={size},itemsize={itemsize}"
    rank = 0 if comm is None else comm.rank
    steps = profile.step_keys(size)
    overlap = _overlap(comm)
    cached = None if refresh or rank != 0 else _read_cache(key, len(steps))
    values = np.zeros(1 + len(RATES) + 2 * len(steps))
    if cached is not None:
        values[:] = [1.0, *(cached[n] for n in RATES), *np.ravel(cached["steps"])]
    if size > 1:
        al.bcast(values, comm, root=0)
    if not values[0]:
        measured = measure(comm, itemsize, ab.alpha)
        values[1:1 + len(RATES)] = [measured[n] for n in RATES]
        if steps:
            values[1 + len(RATES):] = profile.step_times(comm, itemsize).ravel()
        if size > 1:
            al.allreduce(values, comm, op=al.SUM)
            values /= size
        # (the same on every rank: measured as the slowest rank's, estimated alike)
        fitted = fit_training_steps(comm, _model(ab, itemsize, values, steps, overlap))
        for name, value in zip(FITTED, fitted):
            values[1 + RATES.index(name)] = value
        if rank == 0:
            _write_cache(key, {**dict(zip(RATES, values[1:1 + len(RATES)].tolist())),
                               "steps": values[1 + len(RATES):].reshape(-1, 2).tolist()})
    return _model(ab, itemsize, values, steps, overlap)


def _model(ab, itemsize: int, values, steps, overlap: float) -> CostModel:
    rates = dict(zip(RATES, values[1:1 + len(RATES)].tolist()))
    fitted = values[1 + len(RATES):].reshape(-1, 2).tolist()
    return CostModel(alpha=ab.alpha, beta=ab.beta, itemsize=itemsize, overlap=overlap, **rates,
                     steps=tuple((kind, group, a, b) for (kind, group), (a, b)
                                 in zip(steps, fitted)))


# (batch, widths, strategy per layer of a 1-D mesh of n ranks, None: Megatron's; whether
# the gradient sums are fused): steps of parameter-gradient reductions (data parallel:
# narrow; deep and narrow, 20 reductions with little computation to hide them, which pins
# ``reduction_call`` down; square; the deep and the square ones again with their sums
# fused in buckets, for ``bucket_call``), of computation alone (unsharded) and of
# critical-path collectives (Megatron: a Partial output's allreduce forward, an input
# gradient's backward; column-parallel layers: an allgather of every output forward, an
# allreduce of every input gradient backward); then the same kinds again at the depths,
# widths and batches the search is asked about (16 layers of 64, 8 of 96, Megatron at 64
# and 128 wide, 3 layers of 512, 6 of 160), so that no fitted cost rests on one or two
# programs' steps.  The batches make each step several of the scheduler's time slices
# long: where ranks outnumber cores, a step of a few slices took up to twice as long in
# one calibration as in the next, depending on how the ranks happened to share the cores,
# and the fitted numbers followed.
_FIT_PROGRAMS = (
    (1024, (64,) * 5, lambda n: ((n, 1), (1, 1)), False),
    (512, (64,) * 11, lambda n: ((n, 1), (1, 1)), False),
    (512, (64,) * 11, lambda n: ((n, 1), (1, 1)), True),
    (256, (256,) * 3, lambda n: ((n, 1), (1, 1)), False),
    (256, (256,) * 3, lambda n: ((n, 1), (1, 1)), True),
    (256, (256,) * 3, lambda n: ((1, 1), (1, 1)), False),
    (256, (256,) * 5, None, False),
    (512, (128,) * 5, lambda n: ((1, 1), (1, n)), False),
    (384, (64,) * 17, lambda n: ((n, 1), (1, 1)), False),
    (384, (64,) * 17, lambda n: ((n, 1), (1, 1)), True),
    (384, (96,) * 9, lambda n: ((n, 1), (1, 1)), False),
    (384, (96,) * 9, lambda n: ((n, 1), (1, 1)), True),
    (384, (64,) * 9, None, False),
    (256, (128,) * 7, None, False),
    (64, (512,) * 4, lambda n: ((n, 1), (1, 1)), False),
    (64, (512,) * 4, lambda n: ((n, 1), (1, 1)), True),
    (64, (512,) * 4, None, False),
    (256, (160,) * 7, lambda n: ((n, 1), (1, 1)), False),
    (256, (160,) * 7, lambda n: ((n, 1), (1, 1)), True),
)
FITTED = ("compute_scale", "op_scale", "call", "reduction_call", "bucket_call")
_START = np.array([1.0, 1.0, 0.0, 0.0, 0.0])
_LOWER = np.array([0.1, 1.0, 0.0, 0.0, 0.0])   # (an op of a step costs at least a tiny one's)
_STEPS = np.array([1e-2, 1e-2, 1e-5, 1e-5, 1e-5])
_WITHOUT_COMMUNICATION = np.array([True, True, False, False, False])   # (fitted on one rank)


def fit_training_steps(comm, model: CostModel, steps: int = 15) -> tuple[float, ...]:
    """``FITTED`` (compute_scale, op_scale, call, reduction_call, bucket_call) fitted by
    least squares to whole training steps of nineteen MLPs (``_FIT_PROGRAMS``) run by the
    ParallelExecutor on ``comm``'s ranks: each measured step (the slowest rank's median)
    against ``model``'s estimate of it with those five free.  Kernels run slower inside a
    step than alone where ranks share cores with each other and with their communication
    (``compute_scale``, from every program); the executor takes longer per op of a step
    than per op of ``measure``'s chain of tiny ones (``op_scale``: deep narrow programs
    run many ops of little computation, wide ones few of much); a collective on the
    critical path costs the executor's path and the wait for the slowest rank besides
    its α (``call``: Megatron's, column-parallel layers', the split loss's sum); a
    parameter-gradient reduction runs on the communication stream under later gradients
    (``reduction_call``: data parallelism's); a fused bucket of them waits for every
    rank's last gradient in it (``bucket_call``: data parallelism's under
    ``fuse_all_reduce_ops``).  Nineteen equations for five unknowns; the estimate is
    linear in them but for the overlap credit (a min), so the fit is Gauss-Newton
    (``fit_step_costs``), each within its bound (compute scale ≥ 0.1, op scale ≥ 1,
    calls ≥ 0).  Without communication (one rank) the calls are 0, and the fused
    programs, the same steps there as their unfused twins, are not run.  Collective over
    ``comm``."""
    from ..executor import Executor
    from ..parallel_context import ParallelMode, set_parallel_context, swapped_context
    from ..parallel_executor import BuildStrategy, ParallelExecutor
    from ..scope import Scope
    from .auto import fc_chain
    from .search import model_parallel

    size = 1 if comm is None else comm.size
    programs, measured, kernels = [], [], {}
    for batch, widths, strategy, fused in _FIT_PROGRAMS:
        if fused and size == 1:      # (one rank sums nothing: its unfused twin's step)
            continue
        depth = len(widths) - 1
        shards = model_parallel(depth, size) if strategy is None else [strategy(size)] * depth
        main, startup, loss = _mlp(batch, widths, shards if size > 1 else None)
        chain, _ = fc_chain(main)
        build = BuildStrategy(fuse_all_reduce_ops=fused)
        with swapped_context():
            if size > 1:
                set_parallel_context(parallel_mode=ParallelMode.SEMI_AUTO_PARALLEL, comm=comm)
            scope = Scope()
            Executor().run(startup, scope=scope)
            pe = ParallelExecutor(main, loss_name=loss, scope=scope, build_strategy=build)
            rng = np.random.default_rng(0)
            feed = {"fit_x": rng.random((batch, widths[0])),
                    "fit_t": rng.random((batch, widths[-1]))}
            for _ in range(3):
                pe.run([loss], feed)
            times = np.zeros(steps)
            for i in range(steps):
                if size > 1:
                    al.barrier(comm)
                start = time.perf_counter()
                pe.run([loss], feed)
                times[i] = time.perf_counter() - start
            pe.close()
        if size > 1:
            al.allreduce(times, comm, op=al.MAX)
        key = (batch, widths, str(shards))       # (a fused twin has the same kernels)
        if key not in kernels:
            kernels[key] = _with_kernels(model, main, comm, size, False)
        buckets = (build.first_bucket_mb, build.fuse_grad_size_mb) if fused else None
        programs.append((chain, shards, dataclasses.replace(kernels[key], buckets=buckets)))
        measured.append(float(np.median(times)))
    return fit_step_costs(programs, np.array(measured), size)


def fit_step_costs(programs, measured, size: int) -> tuple[float, ...]:
    """``FITTED`` minimizing the squared error of the estimates of ``programs`` ((chain,
    strategies, model) each) against ``measured`` seconds.  The estimate is piecewise
    linear in them (linear but for the overlap credit's min), so Gauss-Newton with a
    difference Jacobian is exact between kinks; a value past its bound is held there and
    the rest solved again."""
    from .search import estimate

    def predict(theta):
        return np.array([estimate(chain, size, shards, dataclasses.replace(
            model, **dict(zip(FITTED, theta.tolist())))).time
            for chain, shards, model in programs])

    theta = _START.copy()
    for _ in range(8):
        base = predict(theta)
        jacobian = np.column_stack([(predict(theta + step) - base) / step[j]
                                    for j, step in enumerate(np.diag(_STEPS))])
        free = _WITHOUT_COMMUNICATION.copy() if size == 1 else np.ones(len(FITTED), bool)
        target = measured - base + jacobian @ theta
        while free.any():
            new = _LOWER.copy()
            new[free], *_ = np.linalg.lstsq(jacobian[:, free],
                                            target - jacobian[:, ~free] @ _LOWER[~free],
                                            rcond=None)
            below = free & (new < _LOWER)
            if not below.any():
                break
            free &= ~below
        else:
            new = _LOWER.copy()
        done = np.allclose(new, theta, rtol=1e-6, atol=1e-9)
        theta = new
        if done:
            break
    return tuple(float(v) for v in theta)


def _mlp(batch: int, widths, shards):
    """A tanh MLP of ``widths`` on ``batch`` rows with a squared-error loss and SGD (a
    strategy per layer where ``shards``), named apart from the user's programs."""
    from .. import ir, layers
    from ..optimizer import SGD
    names, ir._names = ir._names, itertools.count()   # leave the user's names as they were
    try:
        main, startup = ir.Program(), ir.Program()
        with ir.program_guard(main, startup):
            h = layers.data("fit_x", (batch, widths[0]), "float64", append_batch_size=False)
            t = layers.data("fit_t", (batch, widths[-1]), "float64", append_batch_size=False)
            for i, width in enumerate(widths[1:]):
                h = layers.fc(h, width, act="tanh", shard=None if shards is None else shards[i])
            loss = layers.mean(layers.square_error_cost(h, t))
            SGD(0.001).minimize(loss)
    finally:
        ir._names = names
    return main, startup, loss.name


def _with_kernels(model: CostModel, program, comm, size: int,
                  searched: bool = True) -> CostModel:
    """``model`` with ``program``'s layer and loss kernels measured (profile.py) at every
    candidate strategy (``searched``), else only at the strategies its layers were given."""
    from .auto import fc_chain
    from .search import candidates
    layers, _ = fc_chain(program)
    given = [layer.fixed or ((1, 1), (1, 1)) for layer in layers]
    strategies = candidates(size) + given if searched else sorted(set(given))
    return dataclasses.replace(
        model, kernels=profile.layer_times(layers, strategies, comm, model.itemsize),
        tail=profile.tail_times(program, layers, strategies, comm))


def program_model(program, comm=None, refresh: bool = False) -> CostModel:
    """``machine_model`` with the kernels of ``program``'s fc chain and of its loss
    measured at the local shapes of every candidate strategy (profile.py); collective over
    ``comm``."""
    from .auto import ITEMSIZE, fc_chain
    _, matmuls = fc_chain(program)
    dtype = program.global_block().var(matmuls[0].inputs["X"][0]).dtype
    model = machine_model(comm, ITEMSIZE.get(dtype, 8), refresh)
    return _with_kernels(model, program, comm, 1 if comm is None else comm.size)
