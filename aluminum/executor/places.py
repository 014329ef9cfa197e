"""Several places in one process (Paddle's multi_devices_graph_pass, for CPU "devices").

``replicate(program, num_places)`` copies every forward and backward op once per extra
place, on place-local variables (``x`` on place 1 is ``x@place1``); parameters and other
persistable variables are shared, read by every place and written by the ops of place 0
only (a replica's writes to them, such as batch_norm's running statistics, go to
place-local variables nobody reads).  Each parameter gradient is then summed over the
places in place order by one ``sum`` op right after its last producer, and the parameter is
updated once, by the program's own optimizer ops.  The SSA graph sees the replicas as
independent chains, so the thread pool runs the places side by side.

``split_feed`` deals a fed batch out to the places (the batch dimension split in order, as
``np.array_split`` does; a variable without a batch dimension goes to every place whole)
and ``merge_fetched`` concatenates a fetched per-place variable along its first axis, as
Paddle's fetch does.  With the gradient scale 1/(places x ranks), training on P places
equals training on one with the whole batch when the batch splits evenly; what surprises
people: as in Paddle, an uneven split weights each place's mean loss equally, so the rows
of a smaller part count more.  With ``gradient_scale="samples"`` each place is weighted by
its rows, so every split equals the whole batch, and a place may get no rows at all.
"""
from __future__ import annotations

import numpy as np

from .backward import GRAD
from .errors import ProgramError
from .ir import Operator, Program

_SUFFIX = "@place"


def place_name(name: str, place: int, always: bool = False) -> str:
    """The variable ``name`` as place ``place`` sees it (place 0 keeps the name, unless
    ``always``: parallel_do renames every place's variables)."""
    return name if place == 0 and not always or not name else f"{name}{_SUFFIX}{place}"


def replicate(program: Program, num_places: int) -> Program:
    """A copy of ``program`` running its forward and backward ops on ``num_places``
    places (see the module docstring)."""
    if num_places < 1:
        raise ProgramError(f"places: expected at least one place, got {num_places}")
    result = program.clone()
    if num_places == 1:
        return result
    block = result.global_block()
    shared = {name for name, var in block.vars.items() if var.persistable}
    ops = []
    for op in block.ops:
        ops.append(op)
        if _per_place(op, shared):
            ops += [on_place(block, op, place, shared) for place in range(1, num_places)]
    grads = [p.name + GRAD for p in block.vars.values() if p.is_parameter]
    for grad in grads:
        versions = [place_name(grad, place) for place in range(num_places)]
        writers = [i for i, op in enumerate(ops) if set(op.output_names()) & set(versions)]
        if not writers or versions[-1] not in block.vars:
            continue
        merge = Operator("sum", {"X": versions}, {"Out": [grad]}, {})
        ops.insert(writers[-1] + 1, merge)
    block.ops = ops
    return result


def split_feed(program: Program, feed: dict, num_places: int) -> dict:
    """``feed`` as the replicated program takes it: each batched variable's rows dealt out
    to the places in order, others given whole to every place."""
    if num_places == 1:
        return feed
    block = program.global_block()
    result = {}
    for name, value in feed.items():
        value = np.asarray(value)
        var = block.vars.get(name)
        batched = var is not None and len(var.shape) > 0 and var.shape[0] == -1
        if batched and len(value) < num_places and not _counts_samples(program):
            raise ProgramError(f"feed {name!r}: a batch of {len(value)} cannot be split "
                               f"over {num_places} places")
        parts = np.array_split(value, num_places) if batched else [value] * num_places
        for place, part in enumerate(parts):
            result[place_name(name, place)] = part
    return result


def _counts_samples(program: Program) -> bool:
    """Whether ``program`` weights places by their samples (``gradient_scale="samples"``),
    which makes an empty place contribute nothing instead of a mean over no samples."""
    return any(op.type == "sample_count" for op in program.global_block().ops)


def fetch_on_places(program: Program, names: list[str], num_places: int) -> list[tuple]:
    """For each fetched name, the variables holding its value: one per place for a
    per-place variable, else the name alone."""
    block = program.global_block()
    groups = []
    for name in names:
        copies = tuple(place_name(name, place) for place in range(num_places))
        groups.append(copies if copies[-1] in block.vars else (name,))
    return groups


def merge_fetched(groups: list[tuple], values: list) -> list[np.ndarray]:
    """The fetched values of ``fetch_on_places``'s groups, in order: a per-place variable's
    values concatenated along the first axis (a loss: one value per place)."""
    merged, index = [], 0
    for group in groups:
        part = values[index:index + len(group)]
        index += len(group)
        merged.append(part[0] if len(part) == 1 else
                      np.concatenate([np.atleast_1d(value) for value in part]))
    return merged


def _per_place(op: Operator, shared: set) -> bool:
    """Forward and backward ops run on every place: those that write a variable of their
    own (optimizer, learning-rate and communication ops write only shared ones)."""
    return op.attrs.get("op_role") not in ("optimize", "communication") and any(
        name and name not in shared for name in op.output_names())


def on_place(block, op: Operator, place: int, shared: set, always: bool = False) -> Operator:
    """``op`` on ``place``'s variables: shared inputs as they are, everything it writes
    and every other input renamed (declared like the original; see ``place_name``)."""
    def rename(name: str, written: bool) -> str:
        if not name or name in shared and (not written or place == 0):
            return name   # (a replica's writes to shared variables go to local copies)
        local = place_name(name, place, always)
        if local not in block.vars:
            var = block.var(name)
            block.create_var(local, var.shape, var.dtype, stop_gradient=var.stop_gradient)
        return local
    inputs = {slot: [rename(n, False) for n in names] for slot, names in op.inputs.items()}
    outputs = {slot: [rename(n, True) for n in names] for slot, names in op.outputs.items()}
    return Operator(op.type, inputs, outputs, dict(op.attrs))
