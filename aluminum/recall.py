"""Finding the plan of a call that repeats an earlier one: the one plan cache of every op.

Every blocking and nonblocking call is "find or make the plan for these arguments, run it"
(``recall``).  A plan is found again when a call passes the very same buffer objects (numpy
arrays or torch tensors), communicator, stream and options as one of the last
``RECENT_PER_OP`` distinct calls of that operation, and nothing validation depends on has
changed since: an array's dtype, shape, writability and contiguity (numpy lets all four
change on an existing array), a tensor's dtype, shape, storage address and contiguity.  Any
other buffer object takes the full path every time.  A plan found a second time is
prepared (``Plan.prepare``: an MPI-4 persistent request on the MPI backend), so a loop over
the same buffers runs as persistent operations.

What surprises people: the plans of those last calls keep their buffers referenced until
newer calls push them out, the selector's table is reloaded, or ``forget()`` is called.
"""
from __future__ import annotations

import sys
from typing import Callable

import numpy as np

from . import selector
from .plan import Plan

RECENT_PER_OP = 4

_recent: dict[str, list[_Entry]] = {}


class _Entry:
    __slots__ = ("objects", "comm", "stream", "options", "snapshot", "plan", "hits")

    def __init__(self, objects, comm, stream, options, snapshot, plan) -> None:
        self.objects, self.comm, self.stream, self.options = objects, comm, stream, options
        self.snapshot, self.plan, self.hits = snapshot, plan, 0


def recall(op: str, objects: tuple, comm, stream, options: tuple,
           make: Callable[[], Plan]) -> Plan:
    """The plan of a call of ``op`` on ``objects`` (its buffer arguments) with ``options``
    (everything else validation depends on: hashable, compared by value); ``make()``
    validates and builds it where no recent call matches.  A matching plan that is still
    running (a nonblocking call on the same buffers not yet waited for) is not reused."""
    entries = _recent.get(op)
    if entries is not None:
        for index, entry in enumerate(entries):
            if entry.comm is comm and entry.stream is stream and entry.options == options \
                    and _unchanged(entry.objects, objects, entry.snapshot):
                plan = entry.plan
                if plan.busy:
                    break
                entry.hits += 1
                if entry.hits == 1:
                    plan.prepare()
                if index:
                    entries.insert(0, entries.pop(index))
                return plan
    plan = make()
    snapshot = _snapshot(objects)
    if snapshot is not None:
        entries = _recent.setdefault(op, [])
        entries.insert(0, _Entry(objects, comm, stream, options, snapshot, plan))
        del entries[RECENT_PER_OP:]
    return plan


def forget(comm=None) -> None:
    """Drop the remembered plans of ``comm`` (all when None) and the buffers they hold;
    ``comm.free()`` drops its own, and a reload of the selector's table drops all, so a
    remembered algorithm choice never outlives the table."""
    if comm is None:
        _recent.clear()
        return
    for entries in _recent.values():
        entries[:] = [entry for entry in entries if entry.comm is not comm]


selector.on_reload(forget)   # called with no argument: forget all


def _unchanged(remembered: tuple, objects: tuple, snapshot: tuple) -> bool:
    """Whether ``objects`` are the remembered objects, each as ``_snapshot`` saw it (dtypes
    compared by identity: numpy's dtype equality costs a microsecond, and an array's dtype
    object only changes when something assigns a new dtype)."""
    if len(remembered) != len(objects):
        return False
    for old, obj, seen in zip(remembered, objects, snapshot):
        if old is not obj:
            return False
        if seen is None:
            continue
        if type(obj) is np.ndarray:
            flags = obj.flags
            if obj.dtype is not seen[0] or obj.shape != seen[1] \
                    or flags.writeable is not seen[2] or flags.c_contiguous is not seen[3]:
                return False
        elif obj.dtype is not seen[0] or obj.shape != seen[1] or obj.data_ptr() != seen[2] \
                or obj.is_contiguous() is not seen[3] or obj.device.type != seen[4]:
            return False
    return True


def _snapshot(objects: tuple):
    """What validation read from each object and may have changed since; None when an
    object is of a kind whose checks are not cheap to redo (the call is not remembered)."""
    state = []
    for obj in objects:
        kind = type(obj)
        if obj is None:
            state.append(None)
        elif kind is np.ndarray:
            flags = obj.flags
            state.append((obj.dtype, obj.shape, flags.writeable, flags.c_contiguous))
        elif _is_tensor(obj):
            state.append((obj.dtype, obj.shape, obj.data_ptr(), obj.is_contiguous(),
                          obj.device.type))
        else:
            return None
    return tuple(state)


def _is_tensor(obj) -> bool:
    torch = sys.modules.get("torch")   # never imported here: a tensor means it was
    return torch is not None and isinstance(obj, torch.Tensor)


def layout(values):
    """A v-variant's counts or displacements as an option: a tuple copy (so a list changed
    in place after the call is seen as changed); as given when not iterable (the full path
    then rejects it)."""
    if values is None:
        return None
    try:
        return tuple(values)
    except TypeError:
        return values
