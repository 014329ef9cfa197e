"""Finding the plan of a call that repeats an earlier one: the one plan cache of every op.

Every blocking and nonblocking call is "find or make the plan for these arguments, run it"
(``recall``).  A plan is found again when a call passes the very same buffer objects (numpy
arrays or torch tensors), communicator, stream and options as one of the last
``RECENT_PER_OP`` distinct calls of that operation, and nothing validation depends on has
changed since: an array's dtype, shape, writability and contiguity (numpy lets all four
change on an existing array), a tensor's dtype, shape, storage address and contiguity.  Any
other buffer object takes the full path every time.  A plan found again runs as a new
call would (the blocking or nonblocking MPI call on the MPI backend, never a persistent
request): whether a call was found here depends on this rank's own buffer reuse, and MPI
matches a collective only with the same form on every rank.  Only ``al.<op>_init`` plans,
made on every rank alike, start MPI-4 persistent requests.

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
    """One remembered call: ``same(objects)`` says whether a call's buffer arguments are
    the remembered ones, unchanged (see ``_matcher``)."""

    __slots__ = ("same", "comm", "stream", "options", "plan")

    def __init__(self, same, comm, stream, options, plan) -> None:
        self.same, self.comm, self.stream, self.options = same, comm, stream, options
        self.plan = plan


def recall(op: str, objects: tuple, comm, stream, options: tuple,
           make: Callable[..., Plan], *args) -> Plan:
    """The plan of a call of ``op`` on ``objects`` (its buffer arguments) with ``options``
    (everything else validation depends on, compared by value, and fixing how many
    objects there are); ``make(*args)`` validates and builds it where no recent call
    matches (a function and its arguments rather than a closure: making a closure over
    every argument costs a fresh cell per argument on every call).
    A matching plan that is still running (a nonblocking call on the same buffers not yet
    waited for) is not reused."""
    entries = _recent.get(op)
    if entries:
        entry = entries[0]   # the common case first: a repeat of the op's latest call
        if entry.comm is comm and entry.stream is stream and entry.options == options \
                and entry.same(objects):
            request = entry.plan._request
            if request is None or request._done:
                return entry.plan
        index = 0
        for entry in entries:
            if entry.comm is comm and entry.stream is stream and entry.options == options \
                    and entry.same(objects):
                plan = entry.plan
                request = plan._request
                if request is not None and not request._done:
                    break
                if index:
                    entries.insert(0, entries.pop(index))
                return plan
            index += 1
    plan = make(*args)
    same = _matcher(objects)
    if same is not None:
        entries = _recent.setdefault(op, [])
        entries.insert(0, _Entry(same, comm, stream, options, plan))
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


def _state(obj) -> tuple:
    """What validation read from a numpy array or tensor that can change on the same
    object: dtype, shape and flags (``flags.num``: writability and contiguity among them)
    of an array; dtype, shape, storage address, contiguity and whether on the CPU of a
    tensor (moving one to another device changes its address).  Dtypes are matched by
    identity first (numpy's dtype equality costs a microsecond; an array's dtype object
    only changes when a new dtype is assigned): the one- and two-array matchers match by
    identity only, so an equal dtype assigned anew is a miss and takes the full path."""
    if type(obj) is np.ndarray:
        return obj.dtype, obj.shape, obj.flags.num
    return obj.dtype, obj.shape, obj.data_ptr(), obj.is_contiguous(), obj.is_cpu


def _matcher(objects: tuple):
    """A function telling whether a call's ``objects`` are these very objects, each in the
    state ``_state`` sees now; None when an object is of a kind whose checks are not cheap
    to redo (the call is not remembered).  The common shapes of argument lists (none, one
    array, an array and None, two arrays) get their own small function: this runs on every
    call, and a general loop costs as much as the rest of the lookup."""
    if any(obj is not None and type(obj) is not np.ndarray and not _is_tensor(obj)
           for obj in objects):
        return None
    arrays = all(obj is None or type(obj) is np.ndarray for obj in objects)
    if not objects:
        return _no_objects
    if arrays and len(objects) == 1:
        (a,) = objects
        a_dtype, a_shape, a_flags = _state(a)
        return lambda given: given[0] is a and a.dtype is a_dtype and a.shape == a_shape \
            and a.flags.num == a_flags
    if arrays and len(objects) == 2 and objects[0] is not None:
        a, b = objects
        a_dtype, a_shape, a_flags = _state(a)
        if b is None:
            return lambda given: given[0] is a and given[1] is None and a.dtype is a_dtype \
                and a.shape == a_shape and a.flags.num == a_flags
        b_dtype, b_shape, b_flags = _state(b)
        return lambda given: given[0] is a and given[1] is b and a.dtype is a_dtype \
            and a.shape == a_shape and a.flags.num == a_flags and b.dtype is b_dtype \
            and b.shape == b_shape and b.flags.num == b_flags
    states = [None if obj is None else _state(obj) for obj in objects]

    def same(given: tuple) -> bool:
        for old, obj, seen in zip(objects, given, states):
            if old is not obj or seen is not None and _state(obj) != seen:
                return False
        return True
    return same


def _no_objects(given: tuple) -> bool:
    return True


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
