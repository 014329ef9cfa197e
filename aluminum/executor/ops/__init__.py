"""The op library: each op type is one registered ``OpKind`` (shape inference, a numpy
kernel, its gradient).  Importing this package registers every op."""
from . import registry
from . import collective, math, nn, optimizers, samples, tensor  # noqa: F401  (registration)

__all__ = ["registry"]
