"""Kernels of sharded ops whose own kernel would compute the wrong local value.

Each rank holds its box of every tensor (layouts/); most ops compute their box from the
boxes of their inputs unchanged.  These do not:

- ``sharded_mean``: the local sum over the whole tensor's count (a summand of the mean);
- ``sharded_reshape``: the rank's box of the output shape, not the whole shape;
- ``sharded_lookup_table``: rows split over ranks (Megatron's vocabulary-parallel
  embedding): ids outside the rank's rows give zeros, the output is a Partial sum;
- ``sharded_softmax_with_cross_entropy``: classes split over ranks (Megatron's
  vocabulary-parallel cross-entropy): the row maximum by a MAX allreduce, the sum of the
  exponentials and the label's logit by one SUM allreduce, over the ranks splitting the
  classes; the gradient is local (one more SUM allreduce only when the Softmax output is
  read).
"""
from __future__ import annotations

import numpy as np

import aluminum as al

from ..layouts import Layout
from ..layouts.ops import _comm
from ..layouts.run import line_comm
from ..layouts.traffic import record
from ..ops.math import Mean, SoftmaxWithCrossEntropy
from ..ops.registry import GradKind, backward_context, get, register
from ..ops.tensor import LookupTable, Reshape


def _layout(attrs, name: str) -> Layout:
    return Layout.from_dict(attrs[name], f"attrs[{name!r}]")


@register
class ShardedMean(Mean):
    type = "sharded_mean"

    def compute(self, ins, attrs, ctx, out):
        x = ins["X"][0]
        return {"Out": [np.asarray(x.sum() / attrs["count"], dtype=x.dtype).reshape(1)]}

    def backward(self, ins, outs, douts, attrs, out):
        x = ins["X"][0]
        return {"X": [np.full(x.shape, douts["Out"][0][0] / attrs["count"], dtype=x.dtype)]}


@register
class ShardedReshape(Reshape):
    type = "sharded_reshape"

    def compute(self, ins, attrs, ctx, out):
        layout = _layout(attrs, "out_layout")
        comm = _comm(ctx, (layout,), self.type)
        return {"Out": [ins["X"][0].reshape(layout.local_shape(comm.rank, attrs["shape"]))]}


@register
class ShardedLookupTable(LookupTable):
    type = "sharded_lookup_table"

    def _rows(self, attrs, ctx, ids):
        layout = _layout(attrs, "w_layout")
        start, stop = layout.box(_comm(ctx, (layout,), self.type).rank, attrs["w_shape"])[0]
        ids = ids.reshape(-1)
        mine = (ids >= start) & (ids < stop)
        return mine, ids[mine] - start

    def compute(self, ins, attrs, ctx, out):
        w = ins["W"][0]
        mine, rows = self._rows(attrs, ctx, ins["Ids"][0])
        result = np.zeros((mine.size, w.shape[1]), w.dtype)
        result[mine] = w[rows]
        return {"Out": [result]}

    def backward(self, ins, outs, douts, attrs, out):
        w = ins["W"][0]
        mine, rows = self._rows(attrs, backward_context(), ins["Ids"][0])
        grad = np.zeros_like(w)
        np.add.at(grad, rows, douts["Out"][0][mine])
        return {"W": [grad], "Ids": [None]}


def _class_lines(layout: Layout, comm):
    """The sub-communicators of the mesh dimensions that split the classes (dimension 1)."""
    return [line_comm(comm, layout.mesh, dim) for dim, p in enumerate(layout.placements)
            if getattr(p, "dim", None) == 1]


def _allreduce(value, lines, op):
    for group in lines:
        if group.size > 1:
            al.allreduce(value, group, op=op)
            moved = 2 * value.nbytes * (group.size - 1) // group.size
            record("allreduce", group.size, moved, moved)
    return value


@register
class ShardedSoftmaxWithCrossEntropy(SoftmaxWithCrossEntropy):
    type = "sharded_softmax_with_cross_entropy"
    communicates = True

    def _setup(self, attrs, ctx, label, rows: int):
        layout = _layout(attrs, "logits_layout")
        comm = _comm(ctx, (layout,), self.type)
        label = label.reshape(-1)
        if label.size != rows:
            raise ValueError(f"Label: expected one label per row of Logits ({rows}), got "
                             f"{label.size}")
        if label.size and (label.min() < 0 or label.max() >= attrs["classes"]):
            raise ValueError(f"Label: expected class indices in [0, {attrs['classes']})")
        start, stop = layout.box(comm.rank, (rows, attrs["classes"]))[1]
        mine = (label >= start) & (label < stop)
        return _class_lines(layout, comm), mine, label[mine] - start

    def compute(self, ins, attrs, ctx, out):
        logits = ins["Logits"][0]
        lines, mine, columns = self._setup(attrs, ctx, ins["Label"][0], logits.shape[0])
        row_max = logits.max(axis=1) if logits.shape[1] else \
            np.full(logits.shape[0], -np.inf, logits.dtype)
        row_max = _allreduce(np.ascontiguousarray(row_max), lines, al.MAX)
        shifted = logits - row_max[:, None]
        exps = np.exp(shifted)
        sums = np.zeros((2, logits.shape[0]), logits.dtype)   # sum of exps, label's logit
        sums[0] = exps.sum(axis=1)
        sums[1][mine] = shifted[mine, columns]
        sums = _allreduce(sums, lines, al.SUM)
        loss = (np.log(sums[0]) - sums[1]).reshape(-1, 1).astype(logits.dtype)
        return {"Softmax": [exps / sums[0][:, None]], "Loss": [loss]}

    def backward(self, ins, outs, douts, attrs, out):
        softmax = outs["Softmax"][0]
        lines, mine, columns = self._setup(attrs, backward_context(), ins["Label"][0],
                                           softmax.shape[0])
        grad = softmax.copy()
        grad[np.flatnonzero(mine), columns] -= 1
        grad *= douts["Loss"][0]
        if attrs.get("softmax_used"):
            d_softmax = douts["Softmax"][0]
            row = _allreduce(np.ascontiguousarray((d_softmax * softmax).sum(axis=1)), lines,
                             al.SUM)
            grad += softmax * (d_softmax - row[:, None])
        return {"Logits": [grad], "Label": [None]}


@register
class ShardedSoftmaxWithCrossEntropyGrad(GradKind):
    """Its gradient op communicates when the Softmax output is read (scheduled in the
    communication chain either way, so every rank issues the same calls in order)."""

    type = "sharded_softmax_with_cross_entropy_grad"
    communicates = True

    def __init__(self) -> None:
        super().__init__(get("sharded_softmax_with_cross_entropy"))
