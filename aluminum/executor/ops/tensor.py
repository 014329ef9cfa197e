"""Creating, reshaping and gathering tensors."""
from __future__ import annotations

import numpy as np

from ..errors import ProgramError
from .registry import OpKind, register


class _Create(OpKind):
    """No inputs; ``shape`` and ``dtype`` attrs give the output."""

    differentiable = False

    def infer(self, block, op):
        out = block.var(op.outputs["Out"][0])
        out.shape, out.dtype = tuple(op.attrs["shape"]), op.attrs.get("dtype", "float32")


@register
class FillConstant(_Create):
    type = "fill_constant"

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [np.full(attrs["shape"], attrs.get("value", 0.0),
                                dtype=attrs.get("dtype", "float32"))]}


@register
class GaussianRandom(_Create):
    """Normal(mean, std) from the op's own ``seed`` (results do not depend on which op
    happens to run first)."""

    type = "gaussian_random"

    def compute(self, ins, attrs, ctx, out):
        rng = np.random.default_rng(attrs["seed"])
        value = rng.normal(attrs.get("mean", 0.0), attrs.get("std", 1.0), attrs["shape"])
        return {"Out": [value.astype(attrs.get("dtype", "float32"))]}


@register
class UniformRandom(_Create):
    type = "uniform_random"

    def compute(self, ins, attrs, ctx, out):
        rng = np.random.default_rng(attrs["seed"])
        value = rng.uniform(attrs.get("min", -1.0), attrs.get("max", 1.0), attrs["shape"])
        return {"Out": [value.astype(attrs.get("dtype", "float32"))]}


@register
class Reshape(OpKind):
    """``shape`` attr; one dimension may be -1 (inferred), 0 copies the input's."""

    type = "reshape"

    def infer(self, block, op):
        x, out = block.var(op.inputs["X"][0]), block.var(op.outputs["Out"][0])
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(op.attrs["shape"])]
        known_in = int(np.prod([d for d in x.shape if d != -1]))
        known_out = int(np.prod([d for d in shape if d != -1]))
        if -1 not in x.shape and -1 not in shape and known_in != known_out:
            raise ProgramError(f"op reshape: {x.name} {list(x.shape)} has {known_in} "
                               f"elements, shape {op.attrs['shape']} has {known_out}")
        out.shape, out.dtype = tuple(shape), x.dtype

    def compute(self, ins, attrs, ctx, out):
        x = ins["X"][0]
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(attrs["shape"])]
        return {"Out": [x.reshape(shape)]}

    def backward(self, ins, outs, douts, attrs, out):
        return {"X": [douts["Out"][0].reshape(ins["X"][0].shape)]}


@register
class Concat(OpKind):
    type = "concat"

    def infer(self, block, op):
        xs = [block.var(n) for n in op.inputs["X"]]
        axis = op.attrs.get("axis", 0)
        shape = list(xs[0].shape)
        for x in xs[1:]:
            if len(x.shape) != len(shape) or any(
                    i != axis % len(shape) and a != b and -1 not in (a, b)
                    for i, (a, b) in enumerate(zip(x.shape, shape))):
                raise ProgramError(f"op concat: {x.name} {list(x.shape)} does not match "
                                   f"{xs[0].name} {list(xs[0].shape)} off axis {axis}")
            shape[axis] = -1 if -1 in (shape[axis], x.shape[axis]) else \
                shape[axis] + x.shape[axis]
        out = block.var(op.outputs["Out"][0])
        out.shape, out.dtype = tuple(shape), xs[0].dtype

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [np.concatenate(ins["X"], axis=attrs.get("axis", 0))]}

    def backward(self, ins, outs, douts, attrs, out):
        axis = attrs.get("axis", 0)
        cuts = np.cumsum([x.shape[axis] for x in ins["X"]])[:-1]
        return {"X": np.split(douts["Out"][0], cuts, axis=axis)}


@register
class Split(OpKind):
    """``sections`` (sizes along ``axis``) outputs, or ``num`` nearly equal parts in order
    (``np.array_split``: the first ``size % num`` parts one longer), for a dimension known
    only at run time (how parallel_do deals a batch out to its places)."""

    type = "split"

    def infer(self, block, op):
        x = block.var(op.inputs["X"][0])
        axis = op.attrs.get("axis", 0)
        if "num" in op.attrs:
            for name in op.outputs["Out"]:
                out = block.var(name)
                shape = list(x.shape)
                if shape[axis] != -1:
                    shape[axis] = -(-shape[axis] // op.attrs["num"])
                out.shape, out.dtype = tuple(shape), x.dtype
            return
        sections = op.attrs["sections"]
        if x.shape[axis] != -1 and sum(sections) != x.shape[axis]:
            raise ProgramError(f"op split: sections {sections} do not add up to dimension "
                               f"{axis} of {x.name} {list(x.shape)}")
        for name, size in zip(op.outputs["Out"], sections):
            out = block.var(name)
            shape = list(x.shape)
            shape[axis] = size
            out.shape, out.dtype = tuple(shape), x.dtype

    def compute(self, ins, attrs, ctx, out):
        axis = attrs.get("axis", 0)
        if "num" in attrs:
            parts = np.array_split(ins["X"][0], attrs["num"], axis=axis)
        else:
            parts = np.split(ins["X"][0], np.cumsum(attrs["sections"])[:-1], axis=axis)
        return {"Out": [part.copy() for part in parts]}

    def backward(self, ins, outs, douts, attrs, out):
        return {"X": [np.concatenate(douts["Out"], axis=attrs.get("axis", 0))]}


@register
class LookupTable(OpKind):
    """Embedding: ``Out[i] = W[Ids[i]]``; ``Ids`` int64 [N, 1]."""

    type = "lookup_table"

    def infer(self, block, op):
        w, ids = block.var(op.inputs["W"][0]), block.var(op.inputs["Ids"][0])
        out = block.var(op.outputs["Out"][0])
        out.shape, out.dtype = (ids.shape[0], w.shape[1]), w.dtype

    def compute(self, ins, attrs, ctx, out):
        return {"Out": [ins["W"][0][ins["Ids"][0].reshape(-1)]]}

    def backward(self, ins, outs, douts, attrs, out):
        w, ids = ins["W"][0], ins["Ids"][0].reshape(-1)
        grad = out.get("W")
        if grad is None:
            grad = np.zeros_like(w)
        else:
            grad.fill(0)
        np.add.at(grad, ids, douts["Out"][0])
        return {"W": [grad], "Ids": [None]}


@register
class Dropout(OpKind):
    """Zero each element with probability ``dropout_prob`` (mask from the op's ``seed``,
    the same every run, so executors agree) and scale the rest by 1/(1-p) (upscale in
    train); ``is_test`` passes ``X`` through."""

    type = "dropout"

    def infer(self, block, op):
        x = block.var(op.inputs["X"][0])
        for name in op.output_names():
            out = block.var(name)
            out.shape, out.dtype = x.shape, x.dtype

    def compute(self, ins, attrs, ctx, out):
        x, p = ins["X"][0], attrs.get("dropout_prob", 0.5)
        if attrs.get("is_test", False) or p == 0:
            mask = np.ones_like(x)
        else:
            keep = np.random.default_rng(attrs["seed"]).random(x.shape) >= p
            mask = (keep / (1 - p)).astype(x.dtype)
        return {"Out": [x * mask], "Mask": [mask]}

    def backward(self, ins, outs, douts, attrs, out):
        return {"X": [douts["Out"][0] * outs["Mask"][0]]}
