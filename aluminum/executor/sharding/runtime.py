"""What running a sharded program adds: each rank's box of what is fed and of the
parameters (every rank holds the whole tensor first: the startup program's seeded
initializers give every rank the same values)."""
from __future__ import annotations

import numpy as np

from ..errors import ProgramError


def local_feed(program, feed: dict, rank: int) -> dict:
    """``feed`` with each whole tensor fed to a laid-out variable cut to ``rank``'s box (a
    rank's own part, fed as such, is kept)."""
    block = program.global_block()
    result = {}
    for name, value in feed.items():
        var = block.vars.get(name)
        if var is not None and var.layout is not None:
            array = np.asarray(value)
            if array.shape == tuple(var.shape):
                value = _box(array, var.layout, rank, var.shape)
        result[name] = value
    return result


def local_scope(program, scope, rank: int) -> None:
    """Each laid-out persistable variable the scope holds whole cut to ``rank``'s box."""
    for var in program.global_block().vars.values():
        if not var.persistable or var.layout is None or var.name not in scope:
            continue
        value = scope[var.name]
        local = var.layout.local_shape(rank, var.shape)
        if tuple(np.shape(value)) == tuple(var.shape) and local != tuple(var.shape):
            scope[var.name] = _box(np.asarray(value), var.layout, rank, var.shape)
        elif tuple(np.shape(value)) != local:
            raise ProgramError(f"variable {var.name!r}: expected the whole tensor "
                               f"{list(var.shape)} or rank {rank}'s part {list(local)} of "
                               f"{var.layout}, got shape {list(np.shape(value))}")


def _box(array, layout, rank: int, shape):
    box = layout.box(rank, shape)
    if box is None:
        raise ProgramError(f"rank {rank} is not on the mesh of {layout}")
    return np.ascontiguousarray(array[tuple(slice(a, b) for a, b in box)])
