"""Arithmetic, activations and losses."""
from __future__ import annotations

import numpy as np

from ..errors import ProgramError
from .registry import OpKind, register, unbroadcast


def _dims_agree(a: int, b: int) -> bool:
    return a == b or a == -1 or b == -1


def _same_dtype(op_type: str, x, y) -> None:
    if x.dtype != y.dtype:
        raise ProgramError(f"op {op_type}: X {x.name} is {x.dtype} but Y {y.name} is "
                           f"{y.dtype}; cast one of them first")


def _matmul(a, b, into):
    """``a @ b``, into ``into`` when given (``@`` otherwise: cupy arrays take it too)."""
    return a @ b if into is None else np.matmul(a, b, out=into)


@register
class Matmul(OpKind):
    """``Out = X @ Y`` for 2-D ``X`` [M, K] and ``Y`` [K, N]."""

    type = "matmul"

    def infer(self, block, op):
        x, y = block.var(op.inputs["X"][0]), block.var(op.inputs["Y"][0])
        _same_dtype("matmul", x, y)
        if len(x.shape) != 2 or len(y.shape) != 2 or not _dims_agree(x.shape[1], y.shape[0]):
            raise ProgramError(f"op matmul: X {x.name} {list(x.shape)} and Y {y.name} "
                               f"{list(y.shape)} cannot be multiplied (expected [M, K] @ "
                               f"[K, N])")
        out = block.var(op.outputs["Out"][0])
        out.shape, out.dtype = (x.shape[0], y.shape[1]), x.dtype

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [_matmul(ins["X"][0], ins["Y"][0], out.get("Out"))]}

    def backward(self, ins, outs, douts, attrs, out):
        x, y, d = ins["X"][0], ins["Y"][0], douts["Out"][0]
        return {"X": [_matmul(d, y.T, out.get("X"))], "Y": [_matmul(x.T, d, out.get("Y"))]}


class _Elementwise(OpKind):
    """numpy broadcasting between ``X`` and ``Y`` (Paddle's ``axis`` is not needed: align
    ``Y`` to the trailing dimensions, as numpy does)."""

    def infer(self, block, op):
        x, y = block.var(op.inputs["X"][0]), block.var(op.inputs["Y"][0])
        _same_dtype(self.type, x, y)
        shape = []
        for a, b in zip(reversed((1,) * (len(y.shape) - len(x.shape)) + x.shape),
                        reversed((1,) * (len(x.shape) - len(y.shape)) + y.shape)):
            if not (a == b or 1 in (a, b) or -1 in (a, b)):
                raise ProgramError(f"op {self.type}: X {x.name} {list(x.shape)} and Y "
                                   f"{y.name} {list(y.shape)} do not broadcast")
            shape.append(-1 if -1 in (a, b) else max(a, b))
        out = block.var(op.outputs["Out"][0])
        out.shape, out.dtype = tuple(reversed(shape)), x.dtype


@register
class ElementwiseAdd(_Elementwise):
    type = "elementwise_add"

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [ins["X"][0] + ins["Y"][0]]}

    def backward(self, ins, outs, douts, attrs, out):
        d = douts["Out"][0]
        return {"X": [unbroadcast(d, ins["X"][0].shape, out.get("X"))],
                "Y": [unbroadcast(d, ins["Y"][0].shape, out.get("Y"))]}


@register
class ElementwiseSub(_Elementwise):
    type = "elementwise_sub"

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [ins["X"][0] - ins["Y"][0]]}

    def backward(self, ins, outs, douts, attrs, out):
        d = douts["Out"][0]
        return {"X": [unbroadcast(d, ins["X"][0].shape, out.get("X"))],
                "Y": [unbroadcast(-d, ins["Y"][0].shape, out.get("Y"))]}


@register
class ElementwiseMul(_Elementwise):
    type = "elementwise_mul"

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [ins["X"][0] * ins["Y"][0]]}

    def backward(self, ins, outs, douts, attrs, out):
        x, y, d = ins["X"][0], ins["Y"][0], douts["Out"][0]
        return {"X": [unbroadcast(d * y, x.shape, out.get("X"))],
                "Y": [unbroadcast(d * x, y.shape, out.get("Y"))]}


@register
class Relu(OpKind):
    type = "relu"

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [np.maximum(ins["X"][0], 0)]}

    def backward(self, ins, outs, douts, attrs, out):
        return {"X": [douts["Out"][0] * (ins["X"][0] > 0)]}


@register
class Tanh(OpKind):
    type = "tanh"

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [np.tanh(ins["X"][0])]}

    def backward(self, ins, outs, douts, attrs, out):
        y = outs["Out"][0]
        return {"X": [douts["Out"][0] * (1 - y * y)]}


@register
class Sigmoid(OpKind):
    type = "sigmoid"

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [1 / (1 + np.exp(-ins["X"][0]))]}

    def backward(self, ins, outs, douts, attrs, out):
        y = outs["Out"][0]
        return {"X": [douts["Out"][0] * y * (1 - y)]}


def _softmax(x):
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@register
class Softmax(OpKind):
    """Softmax over the last axis."""

    type = "softmax"

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [_softmax(ins["X"][0])]}

    def backward(self, ins, outs, douts, attrs, out):
        y, d = outs["Out"][0], douts["Out"][0]
        return {"X": [y * (d - (d * y).sum(axis=-1, keepdims=True))]}


def _labels(label, logits):
    """``label`` as a vector of class indices, one per row of ``logits``, each in
    [0, classes): numpy indexing would take a shorter batch, and -1 as the last class."""
    rows, classes = logits.shape
    if label.dtype.kind not in "iu":
        raise ValueError(f"Label: expected an array of integers, got {label.dtype}")
    if label.size != rows or label.ndim == 0 or label.shape[0] != rows:
        raise ValueError(f"Label: expected one label per row of Logits (shape [{rows}, 1]), "
                         f"got shape {list(label.shape)}")
    label = label.reshape(-1)
    outside = (label < 0) | (label >= classes)
    if outside.any():
        row = int(outside.argmax())
        raise ValueError(f"Label: expected class indices in [0, {classes}), got "
                         f"{int(label[row])} (row {row})")
    return label


@register
class SoftmaxWithCrossEntropy(OpKind):
    """``Loss[i] = -log softmax(Logits[i])[Label[i]]``; ``Label`` int64 [N, 1], one class
    index in [0, C) per row of ``Logits`` [N, C], checked when the op runs (a shorter batch
    or a label outside the range is an error, not numpy's wrap-around)."""

    type = "softmax_with_cross_entropy"

    def infer(self, block, op):
        logits = block.var(op.inputs["Logits"][0])
        label = block.var(op.inputs["Label"][0])
        if len(logits.shape) != 2 or label.shape[-1:] != (1,):
            raise ProgramError(f"op softmax_with_cross_entropy: expected Logits [N, C] and "
                               f"Label [N, 1], got {logits.name} {list(logits.shape)} and "
                               f"{label.name} {list(label.shape)}")
        softmax = block.var(op.outputs["Softmax"][0])
        softmax.shape, softmax.dtype = logits.shape, logits.dtype
        loss = block.var(op.outputs["Loss"][0])
        loss.shape, loss.dtype = (logits.shape[0], 1), logits.dtype

    def compute(self, ins, attrs, ctx, out):
        logits, label = ins["Logits"][0], _labels(ins["Label"][0], ins["Logits"][0])
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_sum = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        log_probs = shifted - log_sum
        loss = -log_probs[np.arange(len(label)), label].reshape(-1, 1)
        return {"Softmax": [np.exp(log_probs)], "Loss": [loss.astype(logits.dtype)]}

    def backward(self, ins, outs, douts, attrs, out):
        softmax, label = outs["Softmax"][0], _labels(ins["Label"][0], outs["Softmax"][0])
        grad = softmax.copy()
        grad[np.arange(len(label)), label] -= 1
        grad *= douts["Loss"][0]
        d_softmax = douts["Softmax"][0]   # zeros unless something read the Softmax output
        grad += softmax * (d_softmax - (d_softmax * softmax).sum(axis=-1, keepdims=True))
        return {"Logits": [grad], "Label": [None]}


@register
class SquareErrorCost(OpKind):
    """``Out = (X - Y) ** 2`` element-wise."""

    type = "square_error_cost"

    def compute(self, ins, attrs, ctx, out):
        diff = ins["X"][0] - ins["Y"][0]
        return {"Out": [diff * diff]}

    def backward(self, ins, outs, douts, attrs, out):
        diff = ins["X"][0] - ins["Y"][0]
        d = 2 * diff * douts["Out"][0]
        return {"X": [d], "Y": [-d]}


@register
class Mean(OpKind):
    """The mean of every element, shape [1]."""

    type = "mean"

    def infer(self, block, op):
        x, out = block.var(op.inputs["X"][0]), block.var(op.outputs["Out"][0])
        out.shape, out.dtype = (1,), x.dtype

    def compute(self, ins, attrs, ctx, out):
        x = ins["X"][0]
        return {"Out": [x.mean().astype(x.dtype).reshape(1)]}   # (numpy or cupy alike)

    def backward(self, ins, outs, douts, attrs, out):
        x = ins["X"][0]
        return {"X": [np.full_like(x, douts["Out"][0][0] / x.size)]}


@register
class ReduceSum(OpKind):
    """The sum of every element, shape [1]."""

    type = "reduce_sum"

    def infer(self, block, op):
        x, out = block.var(op.inputs["X"][0]), block.var(op.outputs["Out"][0])
        out.shape, out.dtype = (1,), x.dtype

    def compute(self, ins, attrs, ctx, out):
        x = ins["X"][0]
        return {"Out": [x.sum().astype(x.dtype).reshape(1)]}   # (numpy or cupy alike)

    def backward(self, ins, outs, douts, attrs, out):
        x = ins["X"][0]
        return {"X": [np.full_like(x, douts["Out"][0][0])]}


@register
class Scale(OpKind):
    """``Out = scale * X + bias``."""

    type = "scale"

    def compute(self, ins, attrs, ctx, out):
        x = ins["X"][0]
        return {"Out": [(x * x.dtype.type(attrs.get("scale", 1.0))
                         + x.dtype.type(attrs.get("bias", 0.0))).astype(x.dtype, copy=False)]}

    def backward(self, ins, outs, douts, attrs, out):
        d = douts["Out"][0]
        return {"X": [(d * d.dtype.type(attrs.get("scale", 1.0))).astype(d.dtype, copy=False)]}


@register
class Sum(OpKind):
    """``Out = X[0] + X[1] + ...`` in list order (how gradients accumulate, so the order
    is fixed and results are reproducible)."""

    type = "sum"

    def compute(self, ins, attrs, ctx, out):
        arrays = ins["X"]
        total = out.get("Out")
        if total is None:
            total = arrays[0].copy()
        else:
            np.copyto(total, arrays[0])
        for other in arrays[1:]:
            total += other
        return {"Out": [total]}

    def backward(self, ins, outs, douts, attrs, out):
        return {"X": [douts["Out"][0]] * len(ins["X"])}
