"""``SGD``, ``Momentum``, ``Adam``: ``minimize(loss)`` appends the backward pass and one
update op per parameter; the learning rate is a persistable variable (``lr_var``), which
``piecewise_decay`` rewrites each step from a step counter."""
from __future__ import annotations

from .backward import append_backward
from .ir import Variable, default_startup_program, unique_name


class Optimizer:
    type = ""

    def __init__(self, learning_rate: float,
                 boundaries: list[int] | None = None, values: list[float] | None = None):
        """``boundaries``/``values``: piecewise-constant decay (``values[i]`` until step
        ``boundaries[i]``), as Paddle's ``piecewise_decay``."""
        self.learning_rate = learning_rate
        self.boundaries, self.values = boundaries, values
        self.lr_var: Variable | None = None

    def minimize(self, loss: Variable) -> list[tuple[Variable, Variable]]:
        params_grads = append_backward(loss)
        block = loss.block
        self.lr_var = self._learning_rate(block, loss.dtype)
        for param, grad in params_grads:
            self._append_update(block, param, grad)
        return params_grads

    def _learning_rate(self, block, dtype: str) -> Variable:
        """A persistable learning rate in the loss's dtype (a float32 rate would round a
        float64 model's steps)."""
        name = unique_name("learning_rate")
        self._persistable(block, name, (1,), self.learning_rate, dtype)
        if self.boundaries:
            step = unique_name("lr_step")
            self._persistable(block, step, (1,), 0.0, dtype)
            block.append_op("piecewise_decay", {"Step": [step]},
                            {"Out": [name], "StepOut": [step]},
                            {"boundaries": tuple(self.boundaries),
                             "values": tuple(self.values)}, infer=False)
        return block.var(name)

    @staticmethod
    def _persistable(block, name, shape, value, dtype="float32") -> str:
        block.create_var(name, shape, dtype, persistable=True)
        startup = default_startup_program().global_block()
        startup.create_var(name, shape, dtype, persistable=True)
        startup.append_op("fill_constant", {}, {"Out": [name]},
                          {"shape": tuple(shape), "value": value, "dtype": dtype})
        return name

    def _append_update(self, block, param, grad) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    def _append_update(self, block, param, grad):
        block.append_op("sgd", {"Param": [param.name], "Grad": [grad.name],
                                "LearningRate": [self.lr_var.name]},
                        {"ParamOut": [param.name]}, {"op_role": "optimize"})


class Momentum(Optimizer):
    def __init__(self, learning_rate: float, momentum: float = 0.9, **decay):
        super().__init__(learning_rate, **decay)
        self.momentum = momentum

    def _append_update(self, block, param, grad):
        velocity = self._persistable(block, f"{param.name}@velocity", param.shape, 0.0,
                                     param.dtype)
        block.append_op("momentum", {"Param": [param.name], "Grad": [grad.name],
                                     "Velocity": [velocity],
                                     "LearningRate": [self.lr_var.name]},
                        {"ParamOut": [param.name], "VelocityOut": [velocity]},
                        {"mu": self.momentum, "op_role": "optimize"})


class Adam(Optimizer):
    def __init__(self, learning_rate: float = 1e-3, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, **decay):
        super().__init__(learning_rate, **decay)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def _append_update(self, block, param, grad):
        state = {slot: self._persistable(block, f"{param.name}@{slot.lower()}", shape, value,
                                         param.dtype)
                 for slot, shape, value in (("Moment1", param.shape, 0.0),
                                            ("Moment2", param.shape, 0.0),
                                            ("Beta1Pow", (1,), self.beta1),
                                            ("Beta2Pow", (1,), self.beta2))}
        block.append_op("adam", {"Param": [param.name], "Grad": [grad.name],
                                 "LearningRate": [self.lr_var.name],
                                 **{slot: [name] for slot, name in state.items()}},
                        {"ParamOut": [param.name],
                         **{slot + "Out": [name] for slot, name in state.items()}},
                        {"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon,
                         "op_role": "optimize"})
