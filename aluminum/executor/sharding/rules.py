"""Which ops can be sharded, their signatures (strategy.py), and the kernel a sharded op
runs when its own would compute the wrong local value (kernels.py).

Lower-case letters are dimensions a strategy may split; an upper-case letter is a size-1
dimension (broadcast, or a label's column) that stays whole.  An op not listed here runs
repeated: its inputs are gathered to every rank first.
"""
from __future__ import annotations

import numpy as np

from ..errors import ProgramError
from ..layouts import Shard
from .strategy import OpSharding, Signature

LOWER = "abcdefghijklmnopqrstuvwxyz"
UNARY = ("relu", "tanh", "sigmoid", "scale")
ELEMENTWISE = ("elementwise_add", "elementwise_sub", "elementwise_mul", "square_error_cost")
SHARDABLE = ("matmul", "softmax_with_cross_entropy", "mean", "reduce_sum", "reshape",
             "lookup_table", "sum", *UNARY, *ELEMENTWISE)


def _dims(n: int) -> str:
    return LOWER[:n]


def signature(op, block, layouts: dict | None = None) -> Signature | None:
    """``op``'s signature (None: not shardable).  A reshape's depends on which input
    dimensions are split (``layouts``, or its strategy): each keeps its letter in the output
    dimension it maps onto, when one does (``reshape_map``)."""
    shape = {name: block.var(name).shape for name in op.input_names() + op.output_names()
             if name}
    first = op.input_names()[0] if op.inputs else None
    if op.type == "matmul":
        return Signature({"X": ["mk"], "Y": ["kn"]}, {"Out": ["mn"]})
    if op.type in UNARY:
        dims = _dims(len(shape[first]))
        return Signature({"X": [dims]}, {"Out": [dims]})
    if op.type == "sum":
        dims = _dims(len(shape[first]))
        return Signature({"X": [dims] * len(op.inputs["X"])}, {"Out": [dims]})
    if op.type in ELEMENTWISE:
        out = shape[op.outputs["Out"][0]]
        dims = _dims(len(out))
        inputs = {}
        for slot in ("X", "Y"):
            own = shape[op.inputs[slot][0]]
            offset = len(out) - len(own)
            inputs[slot] = ["".join(dims[offset + i] if size == out[offset + i] else
                                    dims[offset + i].upper() for i, size in enumerate(own))]
        return Signature(inputs, {"Out": [dims]})
    if op.type in ("mean", "reduce_sum"):
        return Signature({"X": [_dims(len(shape[first]))]}, {"Out": ["Z"]})
    if op.type == "softmax_with_cross_entropy":
        return Signature({"Logits": ["nc"], "Label": ["nZ"]},
                         {"Softmax": ["nc"], "Loss": ["nZ"]}, frozenset("c"))
    if op.type == "lookup_table":
        return Signature({"W": ["vd"], "Ids": ["nZ"]}, {"Out": ["nd"]})
    if op.type == "reshape":
        x = shape[first]
        dims = _dims(len(x))
        split = _split_dims(op, x, layouts)
        mapped = reshape_map(x, shape[op.outputs["Out"][0]], split)
        out = [LOWER[len(x) + i].upper() for i in range(len(shape[op.outputs["Out"][0]]))]
        for d, target in mapped.items():
            out[target] = dims[d]
        return Signature({"X": [dims]}, {"Out": ["".join(out)]})
    return None


def _split_dims(op, x_shape, layouts) -> set:
    if "shard" in op.attrs:
        return {d for d, parts in enumerate(op.attrs["shard"][0]) if parts > 1}
    layout = (layouts or {}).get("X", [None])[0]
    if layout is None:
        return set()
    return {p.dim for p in layout.placements if isinstance(p, Shard)}


def reshape_map(x_shape, out_shape, split) -> dict:
    """For each split input dimension that may stay one block of rows in the output: the
    output dimension it would become, the first whose dimensions before it hold as many
    elements as the input's before it (whether every rank's box really maps onto a box is
    checked once the layouts are known: ``reshape_keeps_boxes``)."""
    mapped = {}
    for d in sorted(split):
        before = int(np.prod(x_shape[:d]))
        for target in range(len(out_shape)):
            if int(np.prod(out_shape[:target])) == before and out_shape[target] > 1 and \
                    int(np.prod(x_shape[d:])) == int(np.prod(out_shape[target:])):
                mapped[d] = target
                break
    return mapped


def reshape_keeps_boxes(x_layout, out_layout, x_shape, out_shape, ranks) -> bool:
    """Whether every rank's box of the input, flattened, is its box of the output."""
    if int(np.prod(x_shape)) > 2 ** 22:
        return all(isinstance(p, Shard) and x_shape[p.dim] == out_shape[p.dim]
                   for p in x_layout.placements if isinstance(p, Shard))
    flat_x = np.arange(int(np.prod(x_shape))).reshape(x_shape)
    flat_out = flat_x.reshape(out_shape)
    for rank in ranks:
        a, b = x_layout.box(rank, x_shape), out_layout.box(rank, out_shape)
        if (a is None) != (b is None):
            return False
        if a is not None and not np.array_equal(
                flat_x[tuple(slice(*r) for r in a)].ravel(),
                flat_out[tuple(slice(*r) for r in b)].ravel()):
            return False
    return True


def local_kernel(op, block, sharding: OpSharding, sig: Signature) -> tuple[str, dict]:
    """The op type and extra attrs the op runs with under ``sharding``: its own, or a
    sharded kernel's (kernels.py) where the local computation needs the rank's offsets
    or a collective."""
    split = {letter for letter in sharding.letters if letter is not None}
    in_layout = {slot: sharding.layout(dims_list[0]).to_dict()
                 for slot, dims_list in sig.inputs.items()}
    if op.type == "mean" and split & set(sig.inputs["X"][0]):
        return "sharded_mean", {"count": int(np.prod(block.var(op.inputs["X"][0]).shape))}
    if op.type == "softmax_with_cross_entropy" and "c" in split:
        used = any(op.outputs["Softmax"][0] in other.input_names() for other in block.ops)
        return "sharded_softmax_with_cross_entropy", {
            "logits_layout": in_layout["Logits"], "softmax_used": used,
            "classes": int(block.var(op.inputs["Logits"][0]).shape[1])}
    if op.type == "lookup_table" and "v" in split:
        return "sharded_lookup_table", {"w_layout": in_layout["W"],
                                        "w_shape": tuple(block.var(op.inputs["W"][0]).shape)}
    if op.type == "reshape" and split:
        out_dims = sig.outputs["Out"][0]
        return "sharded_reshape", {"out_layout": sharding.layout(out_dims).to_dict()}
    return op.type, {}


def check_shardable(op, label: str) -> None:
    if "shard" in op.attrs and op.type not in SHARDABLE:
        raise ProgramError(f"{label}: strategy {op.attrs['shard']} set on an op that cannot "
                           f"be sharded; expected one of {', '.join(sorted(SHARDABLE))}")
