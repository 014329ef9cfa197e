"""Measured costs for the search: each layer's kernels at the local shapes a strategy gives
it, and each kind of redistribution step at the group sizes the meshes have.

An analytic model (FLOPs at one matmul's rate, bytes at one bandwidth) misses what decides
a step's time on a CPU: BLAS runs a 512 × 64 by 64 × 64 product at a fraction of the rate
of a square one, a gradient's transposed products run slower than the forward's, small
element-wise ops cost their call more than their bytes, and an allreduce costs its
reduction and copies, not only its wire time.  So, as FlexFlow's simulator does, the costs
are measured on this machine, on every rank at once (the load the job makes is in them):

- ``layer_times(layers, strategies, comm, itemsize)``: for every distinct (local rows, inner,
  columns, activation, optimizer) a layer can have under the candidate strategies, one run
  of the executor's own kernels -- matmul, bias add, tanh, their gradients, the optimizer
  update of weight and bias -- median of a few, averaged over the ranks (so every rank
  searches with the same numbers); each run on the next of as many sets of arrays as the
  chain holds per rank (``layer_bytes``), so that a layer finds in the caches what a step
  of the chain leaves there, not its own arrays of the run before;
- ``tail_times(program, layers, strategies, comm)``: the loss ops after the chain
  (``square_error_cost``, ``mean``, ...) and their gradients, run by their kernels on each
  part of the last layer's output;
- ``step_times(comm, itemsize)``: α and β of each collective step kind (allreduce,
  reduce_scatter, allgather, alltoall) on lines of every group size a mesh of ``comm.size``
  ranks can have, fitted to redistributions of two sizes run through the executor's own
  ``redistribute`` on all ranks at once; and ``sum``, the data-parallel ``allreduce`` op's
  bucket over every rank, with which the sharded pass sums gradients.

What surprises people: activations are costed as tanh whatever the layer uses, and the
measured times are those of the process layout of the calibration run -- a cost model
measured with 4 ranks on 2 cores predicts 4 ranks on 2 cores.  Each kernel is timed in
strides of back-to-back calls (``stride_seconds``), not as single calls, which makes the
calibration take a few seconds longer.
"""
from __future__ import annotations

import itertools
import math
import os
import time
import warnings

import numpy as np

import aluminum as al

STEP_KINDS = ("allreduce", "reduce_scatter", "allgather", "alltoall")
_REPEATS = 5
STRIDE_S = 0.01     # seconds, where ranks share cores: a few scheduler slices
OWN_CORE_STRIDE_S = 0.02   # seconds, where each rank has a core: past a VM's brief stalls
MAX_COPIES = 32     # sets of arrays a layer's kernels are timed on, at most,
COPIES_BYTES = 256 << 20   # ...holding at most this (past most CPUs' caches: cold anyway)
# Just under glibc's ceiling for its dynamic mmap threshold (32 MiB on 64-bit): freeing
# an array of this size raises the threshold to it, and the trim threshold to twice it.
SETTLING_BYTES = 31 << 20
_settled = False


def settle_allocator() -> None:
    """Once per process: free one array of ``SETTLING_BYTES`` (never touched), so that the
    C library's allocator runs the kernels as it runs them in a process that has been
    training for a while.

    glibc starts by mapping each array of 128 KiB or more on its own and by returning
    freed memory to the system past 128 KiB at the top of its heap; it raises both limits
    itself the first time a larger mapped array is freed.  Until then a kernel whose
    temporaries are about 128 KiB (the Adam update of a 128 x 128 float64 layer)
    page-faults on every call when timed alone, and a profile taken first thing in a
    process (a cached calibration, then the search) priced such layers far above what
    they take in a step.  Elsewhere the free changes nothing."""
    global _settled
    if not _settled:
        _settled = True
        np.empty(SETTLING_BYTES, np.uint8)


def run_times(fn, repeats: int) -> list[float]:
    """Seconds of ``repeats`` runs of ``fn`` after one untimed run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _median(fn, repeats: int = _REPEATS) -> float:
    return float(np.median(run_times(fn, repeats)))


def stride_seconds(comm=None) -> float:
    """How long each kernel is timed back to back: ``$AL_PROFILE_STRIDE_S`` if set (0:
    the median of single calls), else ``STRIDE_S`` where this node's ranks outnumber the
    cores this process may run on, else ``OWN_CORE_STRIDE_S``.  Ranks sharing a core run
    a kernel shorter than a scheduler slice uncontended and a long one at a share of the
    core, as a step runs both; timed alone, the short ones would look faster than they
    run in a step.  Where each rank has a core, a few single calls of a few milliseconds
    fall in one moment of the machine, and a shared VM's moments differ: the same kernel
    so timed moved from one calibration to the next, and every prediction with it."""
    given = os.environ.get("AL_PROFILE_STRIDE_S", "").strip()
    if given:
        try:
            return max(0.0, float(given))
        except ValueError:
            warnings.warn(f"aluminum: AL_PROFILE_STRIDE_S: expected seconds, got {given!r}; "
                          "using the default", RuntimeWarning, stacklevel=2)
    from ..parallel_executor import cores_per_rank
    return STRIDE_S if cores_per_rank(comm) < 1 else OWN_CORE_STRIDE_S


def _in_stride(fn, least: float, repeats: int = 3) -> float:
    """Seconds per call of ``fn``, timed over runs of back-to-back calls lasting at least
    ``least`` each (median of ``repeats`` runs): long enough that ranks sharing cores are
    descheduled inside the run as they are inside a step, so a short kernel and a long
    one are measured at the same share of a core.  ``least`` 0: the median of single
    calls."""
    if least <= 0:
        return _median(fn)
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    count = max(1, math.ceil(least / max(once, 1e-7)))

    def run():
        for _ in range(count):
            fn()
    return _median(run, repeats) / count


def _part(length: int, parts: int) -> int:
    """The largest of ``numpy.array_split``'s parts."""
    return -(-length // parts)


def _together(comm) -> None:
    if comm is not None and comm.size > 1:
        al.barrier(comm)


def layer_key(layer, strategy) -> tuple:
    """(rows, inner, columns, activation, optimizer arrays) of the largest local matmul."""
    (m, k), (_, n) = strategy
    return (_part(layer.batch, m), _part(layer.inputs, k), _part(layer.outputs, n),
            bool(layer.act), layer.state)


def layer_bytes(key: tuple, itemsize: int) -> int:
    """What one layer of ``key`` holds on a rank: its input, weight and bias, their
    gradients and optimizer arrays, and its forward outputs and their gradients."""
    rows, inner, cols, act, state = key
    parameters = (inner + 1) * cols * (2 + state)
    return itemsize * (rows * inner * 2 + parameters + rows * cols * (3 + bool(act)))


def _layer_kernels(key: tuple, dtype, copies: int = 1):
    """Two calls running a layer's kernels once, as the executor runs them: the forward
    ones, then the gradients' and the optimizer's; each call on the next of ``copies``
    sets of arrays in turn, so that the kernels read as much memory between two uses of
    an array as a step of the whole chain does (``layer_times``)."""
    from ..ops.registry import ANYWHERE, get
    rows, inner, cols, act, state = key
    rng = np.random.default_rng(0)
    matmul, add, tanh = get("matmul"), get("elementwise_add"), get("tanh")
    update = get({0: "sgd", 1: "momentum"}.get(state, "adam"))
    lr = np.full(1, 1e-3, dtype)

    def optimizer_inputs(param):
        ins = {"Param": [param], "Grad": [param], "LearningRate": [lr]}
        if state == 1:
            ins["Velocity"] = [np.zeros_like(param)]
        elif state >= 2:
            ins.update(Moment1=[np.zeros_like(param)], Moment2=[np.zeros_like(param)],
                       Beta1Pow=[np.full(1, 0.9, dtype)], Beta2Pow=[np.full(1, 0.999, dtype)])
        return ins

    sets = []
    for _ in range(copies):
        x = rng.random((rows, inner)).astype(dtype)
        w = rng.random((inner, cols)).astype(dtype) / max(inner, 1)
        b = rng.random(cols).astype(dtype)
        sets.append({"x": x, "w": w, "b": b, "dout": rng.random((rows, cols)).astype(dtype),
                     "updates": (optimizer_inputs(w), optimizer_inputs(b))})
    forward_sets, backward_sets = itertools.cycle(sets), itertools.cycle(sets)

    def forward():
        made = next(forward_sets)
        x, w, b = made["x"], made["w"], made["b"]
        made["y"] = y = matmul.compute({"X": [x], "Y": [w]}, {}, None, ANYWHERE)["Out"][0]
        made["z"] = z = add.compute({"X": [y], "Y": [b]}, {}, None, ANYWHERE)["Out"][0]
        if act:
            made["a"] = tanh.compute({"X": [z]}, {}, None, ANYWHERE)["Out"][0]

    def backward():
        made = next(backward_sets)
        y, z, d = made["y"], made["z"], made["dout"]
        if act:
            d = tanh.backward({"X": [z]}, {"Out": [made["a"]]}, {"Out": [d]}, {},
                              ANYWHERE)["X"][0]
        add.backward({"X": [y], "Y": [made["b"]]}, {"Out": [z]}, {"Out": [d]}, {}, ANYWHERE)
        matmul.backward({"X": [made["x"]], "Y": [made["w"]]}, {"Out": [y]}, {"Out": [d]}, {},
                        ANYWHERE)
        for ins in made["updates"]:
            update.compute(ins, {}, None, ANYWHERE)

    # Every set gets its forward outputs first: forward and backward are timed in strides
    # of different lengths, so the backward may reach a set the forward has not.
    for _ in range(copies):
        forward()
    return forward, backward


def layer_times(layers, strategies, comm=None, itemsize: int = 8) -> tuple:
    """``((key, forward seconds, backward seconds), ...)`` for every distinct
    ``layer_key`` of ``layers`` under ``strategies`` (module docstring; backward includes
    the optimizer's update); collective over ``comm`` (every rank passes the same
    layers)."""
    settle_allocator()
    dtype = {8: np.float64, 4: np.float32, 2: np.float16}[itemsize]
    footprint: dict[tuple, int] = {}   # key -> the most a chain using it holds per rank
    for strategy in strategies:
        chain = [layer_key(layer, strategy) for layer in layers]
        held = sum(layer_bytes(key, itemsize) for key in chain)
        for key in chain:
            footprint[key] = max(footprint.get(key, 0), held)
    keys = sorted(footprint)
    seconds = np.zeros((len(keys), 2))
    stride = stride_seconds(comm)
    for row, key in zip(seconds, keys):
        held = min(footprint[key], COPIES_BYTES)
        copies = min(MAX_COPIES, max(1, round(held / layer_bytes(key, itemsize))))
        forward, backward = _layer_kernels(key, dtype, copies)
        _together(comm)     # every rank runs the same kernels at once, as in a step
        row[:] = _in_stride(forward, stride), _in_stride(backward, stride)
    if comm is not None and comm.size > 1:
        al.allreduce(seconds, comm, op=al.SUM)
        seconds /= comm.size
    return tuple((key, f, b) for key, (f, b) in zip(keys, seconds.tolist()))


def tail_key(layer, strategy) -> tuple:
    """(rows, columns) of the last layer's output part, which the loss reads."""
    (m, _), (_, n) = strategy
    return (_part(layer.batch, m), _part(layer.outputs, n))


def _tail_kernels(ops, block, output: str, batch: int, key: tuple):
    """Two calls running the loss ops' kernels (forward, then their gradients) on a part
    of ``key``'s shape of the last layer's output; data they read of the batch's length
    is cut to the part's rows, and data of the output's whole shape (a regression target)
    to the part itself, as the pass lays it out.  Zeros stand in for data (valid class
    labels too)."""
    from ..ops.registry import ANYWHERE, get
    rows, cols = key
    whole = [d if d > 0 else batch for d in block.var(output).shape]
    values = {output: np.random.default_rng(0).random((rows, cols)).astype(
        block.var(output).dtype)}
    done = []

    def value(name):
        if name not in values:
            var = block.var(name)
            shape = [d if d > 0 else batch for d in var.shape]
            if shape == whole:
                shape = [rows, cols]
            elif shape and shape[0] == batch:
                shape[0] = rows
            values[name] = np.zeros(shape, var.dtype)
        return values[name]

    def forward():
        done.clear()
        for op in ops:
            kind = get(op.type)
            ins = {slot: [value(n) for n in names if n] for slot, names in op.inputs.items()}
            outs = kind.compute(ins, op.attrs, None, ANYWHERE)
            for slot, names in op.outputs.items():
                for name, array in zip(names, outs.get(slot, ())):
                    values[name] = array
            done.append((kind, ins, outs, op.attrs))

    def backward():
        for kind, ins, outs, attrs in reversed(done):
            if kind.differentiable:
                douts = {slot: [np.ones_like(a) for a in arrays] for slot, arrays in outs.items()}
                kind.backward(ins, outs, douts, attrs, ANYWHERE)
    return forward, backward


def tail_times(program, layers, strategies, comm=None) -> tuple:
    """``((tail_key, seconds, ops), ...)``: the loss ops' kernels (forward and gradients)
    at every part of the last layer's output ``strategies`` give, and the number of ops
    the executor runs for them (each op, its gradient, the loss gradient's fill); empty
    where a loss op cannot be run alone.  Collective over ``comm``."""
    from .auto import loss_tail
    settle_allocator()
    ops, output = loss_tail(program)
    block = program.global_block()
    last = layers[-1]
    keys = sorted({tail_key(last, s) for s in strategies})
    seconds = np.zeros(len(keys))
    failed = np.zeros(1)
    stride = stride_seconds(comm)
    for i, key in enumerate(keys):
        _together(comm)
        try:
            forward, backward = _tail_kernels(ops, block, output, last.batch, key)
            seconds[i] = _in_stride(lambda: (forward(), backward()), stride)
        except Exception:      # noqa: BLE001 - an op that needs more than its inputs
            failed[0] = 1
    if comm is not None and comm.size > 1:
        al.allreduce(seconds, comm, op=al.SUM)
        al.allreduce(failed, comm, op=al.MAX)
        seconds /= comm.size
    if failed[0]:
        return ()
    return tuple((key, t, 2 * len(ops) + 1) for key, t in zip(keys, seconds.tolist()))


def group_sizes(nranks: int) -> list[int]:
    """The lengths a line of a 1-D or 2-D mesh of ``nranks`` ranks can have (> 1)."""
    return [g for g in range(2, nranks + 1) if nranks % g == 0]


def step_keys(nranks: int) -> list[tuple[str, int]]:
    """(kind, line length) of every step ``step_times`` measures, in its order; ``sum``:
    the data-parallel ``allreduce`` op over every rank (the sharded pass sums gradients
    with it, search.py prices them so)."""
    whole = [("sum", nranks)] if nranks > 1 else []
    return [(kind, group) for group in group_sizes(nranks) for kind in STEP_KINDS] + whole


def step_times(comm, itemsize: int = 8, sizes=(1 << 10, 1 << 20)) -> np.ndarray:
    """α (seconds per step) and β (seconds per byte the busiest rank receives) of each
    ``step_keys(comm.size)`` in a row, fitted to redistributions of two tensor sizes
    (``sizes`` bytes) on lines of that length; this rank's, collective over ``comm``."""
    from ..layouts import DeviceMesh, Layout, Partial, Replicate, Shard, \
        plan_redistribution, redistribute
    dtype = np.dtype({8: np.float64, 4: np.float32, 2: np.float16}[itemsize])
    moves = {"allreduce": (Partial(), Replicate()), "sum": (Partial(), Replicate()),
             "reduce_scatter": (Partial(), Shard(0)),
             "allgather": (Shard(0), Replicate()), "alltoall": (Shard(0), Shard(1))}
    table = []
    for kind, group in step_keys(comm.size):
        whole = group == comm.size     # else lines of ``group`` ranks along a 2-D mesh
        mesh = DeviceMesh((group,) if whole else (comm.size // group, group), comm=comm)
        lead = () if whole else (Replicate(),)
        src, dst = (Layout(mesh, lead + (p,)) for p in moves[kind])
        points = []
        for nbytes in sizes:
            side = max(group, int(math.sqrt(nbytes / itemsize)) // group * group)
            shape = (side, side)
            plan = plan_redistribution(src, dst, shape, dtype.name)
            local = np.ones(src.local_shape(comm.rank, shape), dtype)
            busiest = max(plan.bytes_received(r) for r in range(comm.size))
            if kind == "sum":     # the gradient already in its bucket, as the op finds it
                bucket = al.GradientBucket((local.shape,), dtype, comm)
                points.append((busiest, _median(bucket.run)))
                bucket.free()
            else:
                points.append((busiest, _median(
                    lambda: redistribute(local, src, dst, shape, comm, plan=plan))))
        (b1, t1), (b2, t2) = points
        beta = max((t2 - t1) / (b2 - b1), 0.0) if b2 > b1 else 0.0
        table.append((max(t1 - beta * b1, 0.0), beta))
    return np.array(table, np.float64).reshape(-1, 2)
