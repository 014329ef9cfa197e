"""Executor benchmarks: per-op scheduling overhead and speed-up from independent branches.

    python -m aluminum.bench.executor

1. A chain of 10,000 trivial ops (``scale`` on one element): µs per op for the sequential
   ``Executor`` and ``ParallelExecutor`` with 1, 2 and 4 threads.
2. Two independent branches of equal large matmuls (numpy releases the GIL in them): time
   with 2 threads against 1 thread.
3. A graph of only small ops (the MLP of examples/mnist_mlp.py on 8 samples): 4 threads
   against the sequential executor.
Medians of ``--repeats`` runs (the small-op step: ``4 * repeats`` samples of 20 runs), after
one warm-up run each, the compared configurations taking turns sample by sample; BLAS runs
single-threaded (the script restarts itself with ``OPENBLAS_NUM_THREADS=1`` and friends
when they are not set).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import aluminum.executor as ex
from aluminum.executor import layers

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _interleaved_medians(runs: dict, repeats: int, batch: int = 1) -> dict:
    """Label -> median seconds of one call, over ``repeats`` samples of ``batch`` calls,
    after one warm-up call each.  The labels take turns sample by sample, so a change in
    the machine's load hits every configuration alike and their ratios stay comparable."""
    for run in runs.values():
        run()
    samples: dict = {label: [] for label in runs}
    for _ in range(repeats):
        for label, run in runs.items():
            start = time.perf_counter()
            for _ in range(batch):
                run()
            samples[label].append((time.perf_counter() - start) / batch)
    return {label: statistics.median(values) for label, values in samples.items()}


def _runner(program, scope, threads):
    if threads is None:
        executor = ex.Executor()
        return lambda: executor.run(program, {}, [], scope)
    runner = ex.ParallelExecutor(program, scope=scope,
                                 exec_strategy=ex.ExecutionStrategy(num_threads=threads))
    return lambda: runner.run([], {})


def chain(ops: int = 10_000):
    program = ex.Program()
    block = program.global_block()
    block.create_var("v0", (1,))
    for i in range(ops):
        block.create_var(f"v{i + 1}", (1,))
        block.append_op("scale", {"X": [f"v{i}"]}, {"Out": [f"v{i + 1}"]}, {"scale": 1.0})
    return program, ex.Scope(v0=np.ones(1, np.float32))


def branches(size: int = 1024, depth: int = 4):
    program = ex.Program()
    block = program.global_block()
    scope = ex.Scope()
    for branch in "ab":
        block.create_var(f"{branch}0", (size, size))
        scope[f"{branch}0"] = np.random.default_rng(0).normal(size=(size, size)) / size
        for i in range(depth):
            block.create_var(f"{branch}{i + 1}", (size, size))
            block.append_op("matmul", {"X": [f"{branch}{i}"], "Y": [f"{branch}0"]},
                            {"Out": [f"{branch}{i + 1}"]})
    return program, scope


def small_ops():
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        image = layers.data("image", [64])
        label = layers.data("label", [1], "int64")
        hidden = layers.fc(layers.fc(image, 32, act="relu"), 16, act="relu")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(hidden, 10), label))
        ex.SGD(0.01).minimize(loss)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    rng = np.random.default_rng(0)
    scope["image"] = rng.normal(size=(8, 64)).astype(np.float32)
    scope["label"] = rng.integers(0, 10, (8, 1))
    return main, scope


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if any(os.environ.get(name) != "1" for name in BLAS_THREADS):
        # BLAS reads these when numpy loads, which importing aluminum already did: start
        # again with them set, so that one matmul uses one core
        env = dict(os.environ, **{name: "1" for name in BLAS_THREADS})
        os.execve(sys.executable, [sys.executable, "-m", "aluminum.bench.executor",
                                   *(argv if argv is not None else sys.argv[1:])], env)
    program, scope = chain()
    ops = len(program.global_block().ops)
    print(f"# chain of {ops} trivial ops: µs per op (median of {args.repeats})")
    seconds = _interleaved_medians(
        {label: _runner(program, scope, threads) for label, threads in
         (("sequential", None), ("1 thread", 1), ("2 threads", 2), ("4 threads", 4))},
        args.repeats)
    for label, value in seconds.items():
        print(f"{label:12s} {value / ops * 1e6:8.2f}")
    program, scope = branches()
    seconds = _interleaved_medians({threads: _runner(program, scope, threads)
                                    for threads in (1, 2)}, args.repeats)
    one, two = seconds[1], seconds[2]
    print(f"# two branches of 4 matmuls 1024x1024: 1 thread {one * 1e3:.1f} ms, "
          f"2 threads {two * 1e3:.1f} ms, speed-up {one / two:.2f}x")
    program, scope = small_ops()
    seconds = _interleaved_medians({threads: _runner(program, scope, threads)
                                    for threads in (None, 4)}, args.repeats * 4, batch=20)
    sequential, four = seconds[None], seconds[4]
    print(f"# small-op MLP step: sequential {sequential * 1e6:.0f} µs, 4 threads "
          f"{four * 1e6:.0f} µs ({four / sequential:.2f}x)")

if __name__ == "__main__":
    main()
