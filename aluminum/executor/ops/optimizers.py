"""Parameter updates: ``sgd``, ``momentum``, ``adam`` (each writes its parameter in place,
i.e. its ``ParamOut`` is the ``Param`` variable).  Each result is a new array of the
parameter's dtype, converted only where the arithmetic gave another (a float64 learning
rate on float32 parameters).

The kernels allocate only the arrays they return and one scratch array, computing in place
in them in the order the textbook formula would (so the results are bitwise those of the
formula written out): past glibc's mmap threshold every temporary of a large array is a
fresh mapping with its page faults, on each call - until the allocator raises its
threshold (the first time it frees such a mapping), Adam's ten temporaries made its update
of a 128 x 128 float64 parameter about four times slower."""
from __future__ import annotations

import numpy as np

from .registry import OpKind, register


class _Update(OpKind):
    differentiable = False

    def infer(self, block, op):
        """Outputs are the state variables they update: shapes already set."""


def _plus(array: np.ndarray, other: np.ndarray) -> np.ndarray:
    """``array + other``, written into ``array`` where that holds the sum's dtype."""
    if np.result_type(array, other) == array.dtype:
        return np.add(array, other, out=array)
    return array + other


@register
class SGD(_Update):
    type = "sgd"

    def compute(self, ins, attrs, ctx, out):
        param, grad, lr = ins["Param"][0], ins["Grad"][0], ins["LearningRate"][0]
        updated = np.multiply(grad, lr[0])
        np.subtract(param, updated, out=updated)
        return {"ParamOut": [updated.astype(param.dtype, copy=False)]}


@register
class Momentum(_Update):
    """``v = mu * v + g; p -= lr * v`` (Paddle's momentum, without Nesterov)."""

    type = "momentum"

    def compute(self, ins, attrs, ctx, out):
        param, grad, lr = ins["Param"][0], ins["Grad"][0], ins["LearningRate"][0]
        velocity = _plus(np.multiply(ins["Velocity"][0], attrs.get("mu", 0.9)), grad)
        updated = np.multiply(velocity, lr[0])
        np.subtract(param, updated, out=updated)
        return {"ParamOut": [updated.astype(param.dtype, copy=False)],
                "VelocityOut": [velocity.astype(param.dtype, copy=False)]}


@register
class Adam(_Update):
    type = "adam"

    def compute(self, ins, attrs, ctx, out):
        param, grad, lr = ins["Param"][0], ins["Grad"][0], ins["LearningRate"][0]
        beta1, beta2 = attrs.get("beta1", 0.9), attrs.get("beta2", 0.999)
        epsilon = attrs.get("epsilon", 1e-8)
        # m1 = beta1 * m1 + (1 - beta1) * g; m2 = beta2 * m2 + (1 - beta2) * g * g;
        # p - rate * m1 / (sqrt(m2) + epsilon), in that order
        scratch = np.multiply(grad, 1 - beta1)
        m1 = _plus(np.multiply(ins["Moment1"][0], beta1), scratch)
        np.multiply(grad, 1 - beta2, out=scratch)
        scratch *= grad
        m2 = _plus(np.multiply(ins["Moment2"][0], beta2), scratch)
        b1, b2 = ins["Beta1Pow"][0], ins["Beta2Pow"][0]
        rate = lr[0] * np.sqrt(1 - b2[0]) / (1 - b1[0])
        updated = np.multiply(m1, rate)
        denominator = np.sqrt(m2, out=scratch) if scratch.dtype == m2.dtype else np.sqrt(m2)
        denominator += epsilon
        np.divide(updated, denominator, out=updated)
        np.subtract(param, updated, out=updated)
        dtype = param.dtype
        outs = {"ParamOut": updated, "Moment1Out": m1, "Moment2Out": m2,
                "Beta1PowOut": b1 * beta1, "Beta2PowOut": b2 * beta2}
        return {slot: [value.astype(dtype, copy=False)] for slot, value in outs.items()}


@register
class PiecewiseDecay(_Update):
    """The learning rate for the current step, then the step counter plus one."""

    type = "piecewise_decay"

    def compute(self, ins, attrs, ctx, out):
        step = ins["Step"][0]
        index = int(np.searchsorted(np.asarray(attrs["boundaries"]), step[0], side="right"))
        return {"Out": [np.full(1, attrs["values"][index], dtype=step.dtype)],
                "StepOut": [step + 1]}
