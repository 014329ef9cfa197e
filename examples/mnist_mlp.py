"""A 784-128-64-10 MLP on synthetic "digits" (10 noisy class prototypes), trained with
softmax cross-entropy and Momentum by either executor, or data-parallel over MPI ranks.

    python -m aluminum.run -n 2 examples/mnist_mlp.py           # data-parallel (default)
    python examples/mnist_mlp.py --executor parallel --threads 2
"""
import argparse
import contextlib
import sys

import numpy as np

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers

EXECUTORS = ("sequential", "parallel", "data-parallel")


def build(dtype: str = "float32", seed: int = 1):
    """(main, startup, loss, accuracy inputs) of the MLP."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = seed
    with ex.program_guard(main, startup):
        image = layers.data("image", [784], dtype)
        label = layers.data("label", [1], "int64")
        hidden = layers.fc(image, 128, act="relu", dtype=dtype, name="fc1")
        hidden = layers.fc(hidden, 64, act="relu", dtype=dtype, name="fc2")
        logits = layers.fc(hidden, 10, dtype=dtype, name="fc3")
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        ex.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return main, startup, loss, logits


def dataset(samples: int = 256, dtype: str = "float32", seed: int = 0):
    rng = np.random.default_rng(seed)
    prototypes = rng.normal(size=(10, 784))
    labels = rng.integers(0, 10, size=(samples, 1))
    images = prototypes[labels[:, 0]] + 0.5 * rng.normal(size=(samples, 784))
    return images.astype(dtype), labels.astype(np.int64)


@contextlib.contextmanager
def make_runner(executor: str, main, loss, fetches, scope, feed: dict, threads: int):
    """``with make_runner(...) as (run, feed)``: a zero-argument step of ``executor``
    fetching ``fetches``, and the feed it trains on (data-parallel: this rank's shard, over
    every rank of the job); the executor and communicator are released at the end."""
    if executor == "sequential":
        sequential = ex.Executor()
        yield (lambda: sequential.run(main, feed, fetches, scope)), feed
        return
    comm = al.MPICommunicator() if executor == "data-parallel" else None
    if comm is not None:
        feed = {name: ex.shard(value, comm.size, comm.rank) for name, value in feed.items()}
        print(f"training data-parallel over {comm.size} ranks", flush=True)
    runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm,
                                 exec_strategy=ex.ExecutionStrategy(num_threads=threads))
    try:
        yield (lambda: runner.run(fetches, feed)), feed
    finally:
        runner.close()
        if comm is not None:
            comm.free()


def train(executor: str = "sequential", threads: int = 2, steps: int = 20,
          dtype: str = "float32", model=build, samples: int = 256) -> tuple[list[float], float]:
    """(losses of every step, training accuracy at the end, on this rank's samples) of
    ``model(dtype)`` -> (main, startup, loss, logits); images are shaped as its "image"
    variable wants (784 values, or 1 x 28 x 28 for a conv net)."""
    main, startup, loss, logits = model(dtype)
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    images, labels = dataset(samples, dtype)
    images = images.reshape((-1, *main.global_block().var("image").shape[1:]))
    losses = []
    with make_runner(executor, main, loss, [loss, logits], scope,
                     {"image": images, "label": labels}, threads) as (run, feed):
        for _ in range(steps):
            value, scores = run()
            losses.append(float(value[0]))
    accuracy = float((scores.argmax(axis=1) == feed["label"][:, 0]).mean())
    return losses, accuracy


def main(name: str = "mnist_mlp", model=build, steps: int = 20, samples: int = 256) -> int:
    """Train from the command line; exit status 0 when the loss halved and the training
    accuracy passed 0.9."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=EXECUTORS, default="data-parallel")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=steps)
    args = parser.parse_args()
    losses, accuracy = train(args.executor, args.threads, args.steps, model=model,
                             samples=samples)
    print(f"{name} ({args.executor}): loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
          f"accuracy {accuracy:.2f}")
    return 0 if losses[-1] < 0.5 * losses[0] and accuracy > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
