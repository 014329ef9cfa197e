"""Parameter updates: ``sgd``, ``momentum``, ``adam`` (each writes its parameter in place,
i.e. its ``ParamOut`` is the ``Param`` variable).  Each result is a new array of the
parameter's dtype, converted only where the arithmetic gave another (a float64 learning
rate on float32 parameters)."""
from __future__ import annotations

import numpy as np

from .registry import OpKind, register


class _Update(OpKind):
    differentiable = False

    def infer(self, block, op):
        """Outputs are the state variables they update: shapes already set."""


@register
class SGD(_Update):
    type = "sgd"

    def compute(self, ins, attrs, ctx, out):
        param, grad, lr = ins["Param"][0], ins["Grad"][0], ins["LearningRate"][0]
        return {"ParamOut": [(param - lr[0] * grad).astype(param.dtype, copy=False)]}


@register
class Momentum(_Update):
    """``v = mu * v + g; p -= lr * v`` (Paddle's momentum, without Nesterov)."""

    type = "momentum"

    def compute(self, ins, attrs, ctx, out):
        param, grad, lr = ins["Param"][0], ins["Grad"][0], ins["LearningRate"][0]
        velocity = attrs.get("mu", 0.9) * ins["Velocity"][0] + grad
        return {"ParamOut": [(param - lr[0] * velocity).astype(param.dtype, copy=False)],
                "VelocityOut": [velocity.astype(param.dtype, copy=False)]}


@register
class Adam(_Update):
    type = "adam"

    def compute(self, ins, attrs, ctx, out):
        param, grad, lr = ins["Param"][0], ins["Grad"][0], ins["LearningRate"][0]
        beta1, beta2 = attrs.get("beta1", 0.9), attrs.get("beta2", 0.999)
        epsilon = attrs.get("epsilon", 1e-8)
        m1 = beta1 * ins["Moment1"][0] + (1 - beta1) * grad
        m2 = beta2 * ins["Moment2"][0] + (1 - beta2) * grad * grad
        b1, b2 = ins["Beta1Pow"][0], ins["Beta2Pow"][0]
        rate = lr[0] * np.sqrt(1 - b2[0]) / (1 - b1[0])
        updated = param - rate * m1 / (np.sqrt(m2) + epsilon)
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
