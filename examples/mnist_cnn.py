"""A small convolutional net (conv 5x5 x8, max-pool 2, conv 3x3 x16, max-pool 2, fc 10) on
synthetic 28x28 "digits", trained with softmax cross-entropy and Momentum by either
executor, or data-parallel over MPI ranks (the default).

    python -m aluminum.run -n 2 examples/mnist_cnn.py
    python examples/mnist_cnn.py --executor sequential
"""
import argparse
import sys

import aluminum.executor as ex
from aluminum.executor import layers
from mnist_mlp import EXECUTORS, dataset, make_runner


def build(dtype: str = "float32", seed: int = 1):
    """(main, startup, loss, logits) of the CNN."""
    ex.reset_unique_names()
    main, startup = ex.Program(), ex.Program()
    startup.random_seed = seed
    with ex.program_guard(main, startup):
        image = layers.data("image", [1, 28, 28], dtype)
        label = layers.data("label", [1], "int64")
        hidden = layers.pool2d(layers.conv2d(image, 8, 5, act="relu", name="conv1"), 2)
        hidden = layers.pool2d(layers.conv2d(hidden, 16, 3, act="relu", name="conv2"), 2)
        hidden = layers.reshape(hidden, [-1, 16 * 5 * 5])
        logits = layers.fc(hidden, 10, dtype=dtype, name="fc")
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        ex.Momentum(learning_rate=0.02, momentum=0.9).minimize(loss)
    return main, startup, loss, logits


def train(executor: str = "data-parallel", threads: int = 2, steps: int = 15):
    """(losses of every step, training accuracy at the end, on this rank's samples)."""
    main, startup, loss, logits = build()
    scope = ex.Scope()
    ex.Executor().run(startup, scope=scope)
    images, labels = dataset(samples=128)
    run, feed = make_runner(executor, main, loss, [loss, logits], scope,
                            {"image": images.reshape(-1, 1, 28, 28), "label": labels},
                            threads)
    losses = []
    for _ in range(steps):
        value, scores = run()
        losses.append(float(value[0]))
    accuracy = float((scores.argmax(axis=1) == feed["label"][:, 0]).mean())
    return losses, accuracy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=EXECUTORS, default="data-parallel")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()
    losses, accuracy = train(args.executor, args.threads, args.steps)
    print(f"mnist_cnn ({args.executor}): loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
          f"accuracy {accuracy:.2f}")
    return 0 if losses[-1] < 0.5 * losses[0] and accuracy > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
