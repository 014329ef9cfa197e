"""Linear regression on a synthetic uci_housing-like dataset (13 features), the seeds'
fit_a_line, with the executor layer: build the program once, run it with either executor.

    python examples/fit_a_line.py --executor parallel --threads 2
"""
import argparse
import sys

import numpy as np

import aluminum.executor as ex
from aluminum.executor import layers


def build(dtype: str = "float32", seed: int = 1):
    """(main, startup, loss) of the regression network."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = seed
    with ex.program_guard(main, startup):
        x = layers.data("x", [13], dtype)
        y = layers.data("y", [1], dtype)
        prediction = layers.fc(x, 1, dtype=dtype, name="fc")
        loss = layers.mean(layers.square_error_cost(prediction, y))
        ex.SGD(learning_rate=0.05).minimize(loss)
    return main, startup, loss


def dataset(samples: int = 256, dtype: str = "float32", seed: int = 0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(samples, 13)).astype(dtype)
    weights = rng.normal(size=(13, 1))
    prices = (features @ weights + 0.5 + 0.01 * rng.normal(size=(samples, 1))).astype(dtype)
    return features, prices


def train(executor: str = "sequential", threads: int = 2, steps: int = 60,
          dtype: str = "float32") -> list[float]:
    """Losses of every step."""
    main, startup, loss = build(dtype)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    features, prices = dataset(dtype=dtype)
    if executor == "parallel":
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope,
                                     exec_strategy=ex.ExecutionStrategy(num_threads=threads))
        run = lambda feed: runner.run([loss], feed)   # noqa: E731
    else:
        sequential = ex.Executor()
        run = lambda feed: sequential.run(main, feed, [loss], scope)   # noqa: E731
    return [float(run({"x": features, "y": prices})[0][0]) for _ in range(steps)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=("sequential", "parallel"), default="parallel")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    losses = train(args.executor, args.threads, args.steps)
    print(f"fit_a_line ({args.executor}): loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return 0 if losses[-1] < 0.05 * losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
