"""``sample_count``: how many samples this step trains on here, for the data-parallel
pass's ``gradient_scale="samples"`` (see executor/data_parallel.py)."""
from __future__ import annotations

import numpy as np

from .registry import OpKind, register


@register
class SampleCount(OpKind):
    """``Out`` = an array of the ``shape`` and ``dtype`` attrs filled with the number of
    rows (first dimension) of the arrays in ``X`` together; with a ``Total`` slot, that
    number divided by the rows of the arrays in ``Total`` (a place's share of its
    process's samples; 0 when there are none).  It reads only shapes, so it has no
    gradient."""

    type = "sample_count"
    differentiable = False

    def infer(self, block, op):
        out = block.var(op.outputs["Out"][0])
        out.shape, out.dtype = tuple(op.attrs["shape"]), op.attrs.get("dtype", "float64")

    def compute(self, ins, attrs, ctx, out):
        rows = sum(len(x) for x in ins["X"])
        if "Total" in ins:
            total = sum(len(x) for x in ins["Total"])
            rows = rows / total if total else 0.0
        return {"Out": [np.full(attrs["shape"], rows, dtype=attrs.get("dtype", "float64"))]}
