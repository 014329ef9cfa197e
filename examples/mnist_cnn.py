"""A small convolutional net (conv 5x5 x8, max-pool 2, conv 3x3 x16, max-pool 2, fc 10) on
synthetic 28x28 "digits", trained with softmax cross-entropy and Momentum by either
executor, or data-parallel over MPI ranks (the default).

    python -m aluminum.run -n 2 examples/mnist_cnn.py
    python examples/mnist_cnn.py --executor sequential
"""
import sys

import aluminum.executor as ex
import mnist_mlp
from aluminum.executor import layers


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


if __name__ == "__main__":
    sys.exit(mnist_mlp.main("mnist_cnn", build, steps=15, samples=128))
