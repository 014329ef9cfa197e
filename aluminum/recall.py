"""The one plan cache of every op: what a call finds instead of validating and choosing again.

Every blocking and nonblocking call is "find or make the plan for these arguments, run it"
(``call_blocking``, ``call_nonblocking``), looked up at two levels:

1. **The same buffers again.**  A plan is found again when a call passes the very same
   buffer objects (numpy arrays or torch tensors), communicator, stream and options as one
   of the last ``RECENT_PER_OP`` distinct remembered calls of that operation, and nothing
   validation depends on has changed since: an array's dtype, shape, writability and
   contiguity (numpy lets all four change on an existing array), a tensor's dtype, shape,
   storage address and contiguity.  The plan then runs its prepared call.
2. **New arrays of a kind seen before.**  Everything a call decides that depends only on
   (op, dtype, count, communicator, stream, options) - the checks of counts, roots, layouts
   and reduction ops, the algorithm the selector chose - is kept per kind of call: numpy
   arrays of one dtype, shape and flags (``flags.num``: contiguity, writability and whether
   the array owns its memory), passed in one pattern of identities (``recvbuf=buf`` is
   another kind than two arrays).  A call on new arrays of a kept kind only checks what
   depends on the arrays themselves - that distinct arrays do not overlap (two arrays that
   own their memory never do; others are asked ``np.may_share_memory``, and any possible
   overlap takes the full path, which raises or decides as a first call would) - and binds
   them into the kept arguments.  The same arrays passed twice in a row are promoted to
   level 1.

CPU torch tensors take part in level 2 as the numpy arrays they are validated as (their
``numpy()`` views): a new tensor each call is a new array of a kind seen before.  Anything
else (other buffer kinds, a changed array, a communicator freed, a kind never seen)
takes the full path: validation, which raises the op's ``al.AluminumError`` before anything
runs, then a new plan, remembered at both levels where its buffers allow.

A plan found at either level runs as a new call would (the blocking or nonblocking MPI call
on the MPI backend, never a persistent request): whether a call was found here depends on
this rank's own buffer reuse, and MPI matches a collective only with the same form on every
rank.  Only ``al.<op>_init`` plans, made on every rank alike, start MPI-4 persistent
requests.  Which path a call took never changes its result.

What surprises people: the plans of the last calls keep their buffers referenced (and each
kept kind the arrays of its latest call) until newer calls push them out, the communicator
is freed, the selector's table is reloaded, or ``forget()`` is called.
"""
from __future__ import annotations

import operator
import sys
from typing import Callable

try:
    import cython
except ImportError:   # (running uncompiled without Cython)
    from .core import pure_cython as cython
import numpy as np

from . import dispatch
from .tuning import selector
from .core.buffers import Buffer, checked_array_buffer, cpu_tensor_array
from .core.ops import POINT_TO_POINT
from .engine.progress import submit, wait_started_on
from .plan import Plan, chosen_class

RECENT_PER_OP = 4
KINDS_PER_CONTEXT = 32     # kinds of arrays kept per (op, communicator, stream, options)
CONTEXTS_PER_OP = RECENT_PER_OP   # (communicator, stream, options) kept per op: each holds
                                 # its communicator, as a remembered call does

_OWNDATA = 0x0004          # NPY_ARRAY_OWNDATA in ``ndarray.flags.num``
_ndarray = np.ndarray      # (a global: looked up faster than the module's attribute)

_recent: dict[str, list[_Entry]] = {}
_kinds: dict[str, list[_Context]] = {}


@cython.locals(entry="_Entry", kind="_Kind", plan="Plan")
def call_blocking(op: str, objects: tuple, comm, stream, options: tuple,
                  make: Callable[..., Plan], *args) -> None:
    """Run a blocking call of ``op`` on ``objects`` (its buffer arguments) with ``options``
    (everything else validation depends on, compared by value, and fixing how many objects
    there are); ``make(*args)`` validates and builds its plan where nothing is found (a
    function and its arguments rather than a closure: making a closure over every argument
    costs a fresh cell per argument on every call).  The lookups of ``_find`` are written
    out here for the two common cases, each a function call fewer on every call."""
    entries = _recent.get(op)
    if entries:
        first = objects[0] if objects else None
        entry = entries[0]   # the common case first: a repeat of the op's latest call
        if entry.first is first and entry.comm is comm and entry.stream is stream \
                and entry.options == options and entry.same(objects):
            plan = entry.plan
            request = plan._request
            if request is None or request._done:
                plan.run()
                return
        if _first_remembered(entries, first):
            found = _find(op, objects, comm, stream, options, make, args)
            if found.__class__ is _Kind:
                found.run(objects)
            else:
                found.run()
            return
    first = objects[0] if objects else None
    if first is not None and type(first) is not _ndarray:
        arrays = _tensor_arrays(objects, args)
        if arrays is not None:   # CPU tensors: found or kept as their numpy views
            kind = _kept(op, arrays[0], comm, stream, options, objects)
            if kind is not None:
                kind.run(arrays[0])
                return
            _made(op, objects, comm, stream, options, make, arrays[1], arrays[0]).run()
            return
    kind = _kept(op, objects, comm, stream, options)
    if kind is not None:
        kind.run(objects)
        return
    _made(op, objects, comm, stream, options, make, args).run()


def ran_known(op: str, count: int, a, b, comm, stream, k: int, o1, o2, o3) -> bool:
    """``call_blocking``'s two common cases for a call of ``count`` (0-2) buffer objects
    ``a``, ``b`` and ``k`` (at most 3) options ``o1``, ``o2``, ``o3``, passed as they are:
    a repeat of the op's latest call runs its plan (no tuple made), new numpy arrays of a
    kept kind run that kind.  Returns True where it ran the call; False, having run
    nothing, for everything else (other remembered calls, tensors, first calls), which
    the caller then hands to ``call_blocking``."""
    return _known(op, count, a, b, comm, stream, k, o1, o2, o3, False) is not None


def started_known(op: str, count: int, a, b, comm, stream, k: int, o1, o2, o3):
    """``call_nonblocking``'s two common cases for the arguments of ``ran_known``, started:
    the Request, or None, having started nothing, for everything else, which the caller
    then hands to ``call_nonblocking``."""
    return _known(op, count, a, b, comm, stream, k, o1, o2, o3, True)


@cython.locals(kind="_Kind", plan="Plan", count=cython.int, k=cython.int,
               nonblocking=cython.bint, entries=list)
def _known(op: str, count: int, a, b, comm, stream, k: int, o1, o2, o3, nonblocking: bool):
    """``ran_known`` (``nonblocking`` false: True where it ran the call) and
    ``started_known`` (the Request); None where neither case applies."""
    entries = _recent.get(op)
    if entries:
        plan = _idle_repeat(entries[0], count, a, b, comm, stream, k, o1, o2, o3)
        if plan is not None:
            if nonblocking:
                return plan.start()
            plan.run()
            return True
        if _first_remembered(entries, a):   # (a repeat whose last start is running too)
            return None
    if a is not None and type(a) is not _ndarray:
        return None
    objects = () if count == 0 else (a,) if count == 1 else (a, b)
    options = (o1,) if k == 1 else (o1, o2) if k == 2 else (o1, o2, o3) if k == 3 else ()
    kind = _kept(op, objects, comm, stream, options)
    if kind is None:
        return None
    if nonblocking:
        return kind.start(objects)
    kind.run(objects)
    return True


@cython.locals(entry="_Entry", plan="Plan", count=cython.int, k=cython.int)
def _idle_repeat(entry, count: int, a, b, comm, stream, k: int, o1, o2, o3):
    """``entry``'s plan where a call with ``ran_known``'s arguments is that call again and
    the plan's last start is done with; else None."""
    if entry.first is a and entry.comm is comm and entry.stream is stream \
            and len(entry.options) == k and not _differs_from(entry.options, k, o1, o2, o3) \
            and entry.same_pair(count, a, b):
        plan = entry.plan
        request = plan._request
        if request is None or request._done:
            return plan
    return None


@cython.locals(k=cython.int)
def _differs_from(options: tuple, k: int, o1, o2, o3) -> cython.bint:
    """Whether the first ``k`` of ``options`` differ from ``o1``, ``o2``, ``o3``."""
    return (k > 0 and _differs(options[0], o1)) or (k > 1 and _differs(options[1], o2)) \
        or (k > 2 and _differs(options[2], o3))


def _differs(x, y) -> cython.bint:
    """``x`` and ``y`` differ as a tuple's ``==`` compares its items (identity first)."""
    return x is not y and x != y


@cython.locals(entry="_Entry", plan="Plan")
def call_nonblocking(op: str, objects: tuple, comm, stream, options: tuple,
                     make: Callable[..., Plan], *args):
    """Start a nonblocking call of ``op`` (arguments as ``call_blocking``); its Request.
    A repeat of the op's latest call, its plan done with, is written out here, as in
    ``call_blocking``."""
    entries = _recent.get(op)
    if entries:
        entry = entries[0]
        if entry.first is (objects[0] if objects else None) and entry.comm is comm \
                and entry.stream is stream and entry.options == options \
                and entry.same(objects):
            plan = entry.plan
            request = plan._request
            if request is None or request._done:
                return plan.start()
    found = _find(op, objects, comm, stream, options, make, args)
    return found.start(objects) if found.__class__ is _Kind else found.start()


@cython.locals(entry="_Entry")
def _find(op, objects, comm, stream, options, make, args):
    """The remembered plan of a call, else the kept kind of its new arrays, else its new
    plan (validated by ``make(*args)``, remembered, and its kind kept)."""
    entries = _recent.get(op)
    if entries:
        index = 0
        first = objects[0] if objects else None
        for entry in entries:
            if entry.first is first and entry.comm is comm and entry.stream is stream \
                    and entry.options == options and entry.same(objects):
                plan = entry.plan
                request = plan._request
                if request is not None and not request._done:
                    break    # still running: a new call gets a plan of its own
                if index:
                    entries.insert(0, entries.pop(index))
                return plan
            index += 1
    first = objects[0] if objects else None
    if first is not None and type(first) is not _ndarray:
        arrays = _tensor_arrays(objects, args)
        if arrays is not None:
            kind = _kept(op, arrays[0], comm, stream, options, objects)
            if kind is not None:
                return _Bound(kind, arrays[0])
            return _made(op, objects, comm, stream, options, make, arrays[1], arrays[0])
    kind = _kept(op, objects, comm, stream, options)
    if kind is not None:
        return kind
    return _made(op, objects, comm, stream, options, make, args)


@cython.locals(entry="_Entry")
def _first_remembered(entries: list, first) -> cython.bint:
    """Whether ``first`` is the first object of one of ``entries`` (a call that may be
    remembered: ``_find`` compares the rest)."""
    for entry in entries:
        if entry.first is first:
            return True
    return False


@cython.locals(context="_Context", kind="_Kind")
def _kept(op, objects, comm, stream, options, source=None):
    """The kept kind of a call on new arrays, ready to run on them; None where there is
    none (a freed communicator's were dropped: ``forget``), the arrays may overlap, or the
    arrays are those of the kind's latest call (twice in a row: they get a plan of their
    own, ``_made``).  ``source``: the objects the call was given, where ``objects`` are their views (CPU
    tensors), compared instead with the latest call's."""
    contexts = _kinds.get(op)
    if not contexts:
        return None
    for context in contexts:
        if context.comm is comm and context.stream is stream and context.options == options:
            break
    else:
        return None
    kind = context.latest_of(objects)   # the common case: the kind of the context's last call
    if kind is None:
        key = _signature(objects)
        if key is None:
            return None
        kind = context.kinds.get(key)
        if kind is None:
            return None
        context.note_latest(kind, objects)
    if len(objects) == 2:   # (the kind's: numpy arrays or None)
        a, b = objects
        if a is not None and b is not None and a is not b \
                and not _flags(a) & _flags(b) & _OWNDATA and not _disjoint(objects):
            return None     # (two arrays that own their memory never overlap)
    elif len(objects) > 2 and not _disjoint(objects):
        return None
    given = objects if source is None else source
    last = kind.last
    if last and last[0] is given[0] and all(map(operator.is_, given, last)):
        return None
    kind.last = given
    return kind


def _made(op, objects, comm, stream, options, make, args, arrays=None) -> Plan:
    """The new plan of a call (``make(*args)`` validates), remembered, its kind kept;
    ``arrays``: the numpy views standing for ``objects`` (CPU tensors) in ``args``, the
    kind then kept for them."""
    plan = make(*args)
    _remember(op, objects, comm, stream, options, plan)
    if arrays is not None:
        objects = arrays
    kind = _Kind.of(plan, objects) if _signature(objects) is not None else None
    if kind is not None:
        contexts = _kinds.setdefault(op, [])
        for context in contexts:
            if context.comm is comm and context.stream is stream \
                    and context.options == options:
                break
        else:
            context = _Context(comm, stream, options)
            contexts.insert(0, context)
            del contexts[CONTEXTS_PER_OP:]
        kinds = context.kinds
        key = _signature(objects)
        kinds.pop(key, None)
        if len(kinds) >= KINDS_PER_CONTEXT:
            del kinds[next(iter(kinds))]     # the oldest kind
        kinds[key] = kind
        context.note_latest(kind, objects)
    return plan


def forget(comm=None) -> None:
    """Drop the remembered plans and kept kinds of ``comm`` (all when None) and the buffers
    they hold; ``comm.free()`` drops its own, and a reload of the selector's table drops
    all, so a remembered algorithm choice never outlives the table."""
    if comm is None:
        _recent.clear()
        _kinds.clear()
        return
    for op, entries in _recent.items():
        entries[:] = [entry for entry in entries if entry.comm is not comm]
    for contexts in _kinds.values():
        contexts[:] = [context for context in contexts if context.comm is not comm]


selector.on_reload(forget)   # called with no argument: forget all


@cython.cclass
class _Entry:
    """One remembered call: ``same(objects)`` says whether a call's buffer arguments are
    the remembered ones, unchanged: the very objects, each in the state ``_state`` saw
    (dtype, shape and flags of an array).  No objects, one array, an array and None, and
    two arrays are written out (compiled, their checks read the arrays' fields directly);
    other argument lists are checked by ``general``."""

    def __init__(self, objects: tuple, comm, stream, options, plan) -> None:
        self.first = objects[0] if objects else None
        self.comm, self.stream, self.options, self.plan = comm, stream, options, plan
        self.a = self.b = self.a_dtype = self.a_shape = self.b_dtype = self.b_shape = None
        self.a_flags = self.b_flags = 0
        self.general = None
        arrays = all(obj is None or type(obj) is _ndarray for obj in objects)
        if not objects:
            self.arity = 0
        elif arrays and len(objects) <= 2 and objects[0] is not None:
            self.a = objects[0]
            self.a_dtype, self.a_shape, self.a_flags = _state(self.a)
            if len(objects) == 1:
                self.arity = 1
            elif objects[1] is None:
                self.arity = 2
            else:
                self.arity = 3
                self.b = objects[1]
                self.b_dtype, self.b_shape, self.b_flags = _state(self.b)
        else:
            self.arity = 4
            self.general = _matcher(objects)

    def same(self, objects: tuple) -> cython.bint:
        arity = self.arity
        if arity == 3:
            return objects[0] is self.a and objects[1] is self.b \
                and _unchanged(self.a, self.a_dtype, self.a_shape, self.a_flags) \
                and _unchanged(self.b, self.b_dtype, self.b_shape, self.b_flags)
        if arity == 1:
            return objects[0] is self.a \
                and _unchanged(self.a, self.a_dtype, self.a_shape, self.a_flags)
        if arity == 2:
            return objects[0] is self.a and objects[1] is None \
                and _unchanged(self.a, self.a_dtype, self.a_shape, self.a_flags)
        if arity == 0:
            return True
        return self.general(objects)

    @cython.locals(count=cython.int)
    def same_pair(self, count: int, a, b) -> cython.bint:
        """``same`` of ``count`` objects (0: none, 1: ``(a,)``, 2: ``(a, b)``) passed
        without a tuple; False for objects only ``general`` checks."""
        arity = self.arity
        if count == 0:
            return arity == 0
        if count == 1:
            return arity == 1 and a is self.a \
                and _unchanged(self.a, self.a_dtype, self.a_shape, self.a_flags)
        if b is None:
            return arity == 2 and a is self.a \
                and _unchanged(self.a, self.a_dtype, self.a_shape, self.a_flags)
        return arity == 3 and a is self.a and b is self.b \
            and _unchanged(self.a, self.a_dtype, self.a_shape, self.a_flags) \
            and _unchanged(self.b, self.b_dtype, self.b_shape, self.b_flags)


def _unchanged(a, dtype, shape: tuple, flags: cython.int) -> cython.bint:
    """Whether numpy array ``a`` still has this dtype (the same object), shape and
    ``flags.num``.  Compiled, read from the array's fields: ``flags.num`` makes a flags
    object and ``shape`` a tuple on every call."""
    if cython.compiled:
        return _al_array_unchanged(a, dtype, shape, flags)
    return a.dtype is dtype and a.shape == shape and a.flags.num == flags


def _flags(a) -> cython.int:
    """``a.flags.num`` of numpy array ``a`` (compiled: read from its fields, not through a
    new flags object)."""
    if cython.compiled:
        return _al_array_flags(a)
    return a.flags.num


def _remember(op, objects, comm, stream, options, plan) -> None:
    if any(obj is not None and type(obj) is not _ndarray and not _is_tensor(obj)
           for obj in objects):
        return   # (an object whose checks are not cheap to redo: not remembered)
    entries = _recent.setdefault(op, [])
    entries.insert(0, _Entry(objects, comm, stream, options, plan))
    del entries[RECENT_PER_OP:]


@cython.cclass
class _Context:
    """The kept kinds of calls of one op on one (communicator, stream, options), and the
    latest of them found, with what its arrays were (checked first, from the arrays'
    fields: no key to build and hash)."""

    __slots__ = ("comm", "stream", "options", "kinds", "latest", "pattern", "a_dtype",
                 "a_shape", "a_flags", "b_dtype", "b_shape", "b_flags")

    def __init__(self, comm, stream, options) -> None:
        self.comm, self.stream, self.options = comm, stream, options
        self.kinds: dict[tuple, _Kind] = {}
        self.latest = None
        self.pattern = 0          # the latest kind's objects: 0 none noted, 1 (a,),
        self.a_dtype = self.a_shape = self.b_dtype = self.b_shape = None   # 2 (a, None),
        self.a_flags = self.b_flags = 0                                     # 3 (a, a), 4 (a, b)

    def latest_of(self, objects: tuple):
        """The latest kind noted, where ``objects`` are of it (numpy arrays of its dtypes,
        shapes and flags, in its pattern); None otherwise."""
        pattern = self.pattern
        count = len(objects)
        if pattern == 0 or count == 0 or count > 2:
            return None
        a = objects[0]
        if type(a) is not _ndarray or not _unchanged(a, self.a_dtype, self.a_shape,
                                                      self.a_flags):
            return None
        if count == 1:
            return self.latest if pattern == 1 else None
        b = objects[1]
        if pattern == 2:
            return self.latest if b is None else None
        if pattern == 3:
            return self.latest if b is a else None
        if pattern == 4 and type(b) is _ndarray and b is not a \
                and _unchanged(b, self.b_dtype, self.b_shape, self.b_flags):
            return self.latest
        return None

    def note_latest(self, kind, objects: tuple) -> None:
        """Remember ``kind`` as the latest found, for ``objects`` (its call's)."""
        self.latest, self.pattern = kind, 0
        if not 0 < len(objects) <= 2 or type(objects[0]) is not _ndarray:
            return
        a = objects[0]
        self.a_dtype, self.a_shape, self.a_flags = a.dtype, a.shape, _flags(a)
        if len(objects) == 1:
            self.pattern = 1
            return
        b = objects[1]
        if b is None:
            self.pattern = 2
        elif b is a:
            self.pattern = 3
        elif type(b) is _ndarray:
            self.b_dtype, self.b_shape, self.b_flags = b.dtype, b.shape, _flags(b)
            self.pattern = 4


class _Slot:
    """Where a template's arguments take the Buffer of ``objects[index]``."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


@cython.cclass
class _Kind:
    """One kind of call, decided once: the plan's arguments with every buffer replaced by a
    slot (``template``), what each object's Buffer was found to be, the State classes
    chosen (shared with every plan of the kind) and, where the blocking State has one, its
    ``array_call`` (``direct``: run on the new arrays themselves, in ``order``; what it
    raises becomes the State's ``call_error``) and, made at the first start, its
    nonblocking State's ``array_fresh`` (``fresh``: a State posting on the new arrays).
    ``run(objects)`` and ``start(objects)`` do what a new plan's first ``run()`` and
    ``start()`` would; ``op`` and ``algorithm`` name it to the stall monitor as a plan's
    do."""

    __slots__ = ("comm", "op", "algo", "nbytes", "inplace", "classes", "template",
                 "buffers", "positions", "nested", "arrivals", "direct", "call_error",
                 "order", "last", "fresh", "args")

    @classmethod
    def of(cls, plan: Plan, objects: tuple) -> _Kind | None:
        """The kind of ``plan``'s call; None where its arguments hold anything bound to the
        buffers that a template cannot rebind, or its distinct arrays may overlap."""
        if not _disjoint(objects, exact=True):
            return None
        found: dict[int, tuple] = {}
        try:
            template = _templated(plan.args, objects, found)
        except _NotTemplated:
            return None
        kind = cls.__new__(cls)
        kind.comm, kind.op, kind.algo, kind.nbytes = plan.comm, plan.op, plan.algo, plan.nbytes
        kind.inplace, kind.classes = plan.inplace, plan._classes
        kind.template = template
        kind.buffers = tuple(found.items())
        kind.positions = tuple((position, part.index) for position, part in enumerate(template)
                               if type(part) is _Slot)
        kind.nested = any(type(part) in (tuple, list) and _has_slot(part)
                          for part in template)
        kind.arrivals = None if plan.op in POINT_TO_POINT else plan.comm.arrivals
        kind.last = None
        kind.order = tuple(dict.fromkeys(_slot_indices(template)))
        kind.direct = kind.fresh = kind.args = None
        if all(objects[index].ndim == 1 for index in kind.order):
            state_class = kind.state_class(False)
            kind.direct = dispatch.array_runner(plan.comm, state_class, plan.args)
            kind.call_error = state_class.call_error
            kind.fresh, kind.args = False, plan.args   # (the nonblocking form: made at
        return kind                                    # the first start)

    def bind(self, objects: tuple) -> tuple:
        """The arguments of a call on ``objects`` (checked to be of this kind)."""
        made = [None] * len(objects)
        for index, (dtype, count, writable) in self.buffers:
            made[index] = checked_array_buffer(objects[index], dtype, count, writable)
        if self.nested:
            return _filled(self.template, made)
        arguments = list(self.template)
        for position, index in self.positions:
            arguments[position] = made[index]
        return tuple(arguments)

    def state_class(self, nonblocking: bool) -> type:
        return self.classes.get(nonblocking) or chosen_class(self, self.classes, nonblocking)

    @property
    def algorithm(self) -> str:
        return self.state_class(False).name

    @cython.locals(arrivals="Arrivals")
    def run(self, objects: tuple) -> None:
        direct = self.direct
        arrivals = self.arrivals
        if direct is None:
            self._run_bound(objects, arrivals)
            return
        if arrivals is not None:
            arrivals.enter(self)   # (counted, and marked for the stall monitor)
        try:
            wait_started_on(self.comm)
            _on_arrays(direct, objects, self.order)
        except Exception as exc:   # (free in Python 3.11 unless raised)
            error = self.call_error(exc)
            if error is None:
                raise
            raise error from exc
        finally:
            if arrivals is not None:
                arrivals.leave()

    @cython.locals(arrivals="Arrivals")
    def _run_bound(self, objects: tuple, arrivals) -> None:
        arguments = self.bind(objects)
        if arrivals is None:
            dispatch.run(self.comm, self.op, self.state_class(False), self.nbytes, True,
                         arguments)
            return
        number = arrivals.enter(self)
        try:
            dispatch.run(self.comm, self.op, self.state_class(False), self.nbytes, True,
                         arguments, (arrivals.missing, number))
        finally:
            arrivals.leave()

    @cython.locals(arrivals="Arrivals", number="long long")
    def start(self, objects: tuple):
        fresh = self.fresh
        if fresh is False:
            fresh = self.fresh = dispatch.array_starter(self.comm, self.state_class(True),
                                                        self.args)
        arrivals = self.arrivals
        if fresh is None:
            arguments = self.bind(objects)
            detail = None if arrivals is None else (arrivals.missing, arrivals.arrive())
            return dispatch.run(self.comm, self.op, self.state_class(True), self.nbytes,
                                False, arguments, detail)
        if arrivals is None:
            return submit(_on_arrays(fresh, objects, self.order))
        number = arrivals.arrive()   # (before the State is made, as a plan's start)
        request = submit(_on_arrays(fresh, objects, self.order))
        request.detail = (arrivals.missing, number)
        return request


def _on_arrays(call, objects: tuple, order: tuple):
    """``call`` on the arrays of ``objects`` in a kind's ``order`` (one and two written
    out: no list made)."""
    if len(order) == 2:
        return call(objects[order[0]], objects[order[1]])
    if len(order) == 1:
        return call(objects[order[0]])
    return call(*[objects[index] for index in order])


class _NotTemplated(Exception):
    """A plan's arguments hold something bound to its buffers other than their Buffers."""


def _templated(value, objects: tuple, found: dict):
    """``value`` with every Buffer of one of ``objects`` replaced by its ``_Slot``; records
    in ``found`` what each object's Buffer is (dtype, count, writable)."""
    if isinstance(value, Buffer):
        obj = value.obj
        for index, candidate in enumerate(objects):
            if candidate is obj:
                break
        else:
            raise _NotTemplated
        if value.array is None or value.count != obj.size or value.dtype != obj.dtype:
            raise _NotTemplated
        found[index] = (value.dtype, value.count, value.writable)
        return _Slot(index)
    if isinstance(value, np.ndarray):
        raise _NotTemplated
    if type(value) is tuple:
        return tuple(_templated(part, objects, found) for part in value)
    if type(value) is list:
        return [_templated(part, objects, found) for part in value]
    return value


def _slot_indices(value) -> list:
    """The objects' indices of ``value``'s slots, in order (nested ones included)."""
    if type(value) is _Slot:
        return [value.index]
    if type(value) in (tuple, list):
        return [index for part in value for index in _slot_indices(part)]
    return []


def _has_slot(value) -> bool:
    if type(value) is _Slot:
        return True
    return type(value) in (tuple, list) and any(_has_slot(part) for part in value)


def _filled(value, made: list):
    if type(value) is _Slot:
        return made[value.index]
    if type(value) is tuple:
        return tuple(_filled(part, made) for part in value)
    if type(value) is list:
        return [_filled(part, made) for part in value]
    return value


def _signature(objects: tuple):
    """The kind of a call's buffer arguments: per numpy array its dtype, shape and flags,
    and which arguments are one object; None unless each is a numpy array or None."""
    if len(objects) == 1:
        (a,) = objects
        if type(a) is _ndarray:
            return a.dtype, a.shape, _flags(a)
        return None
    if len(objects) == 2 and objects[0] is not None:
        a, b = objects
        if type(a) is not _ndarray:
            return None
        if b is None:
            return a.dtype, a.shape, _flags(a), None
        if type(b) is not _ndarray:
            return None
        if b is a:
            return a.dtype, a.shape, _flags(a), True
        return a.dtype, a.shape, _flags(a), b.dtype, b.shape, _flags(b)
    key = []
    for index, obj in enumerate(objects):
        if obj is None:
            key.append(None)
            continue
        if type(obj) is not _ndarray:
            return None
        first = next(i for i, other in enumerate(objects) if other is obj)
        key.append(first if first < index else (obj.dtype, obj.shape, obj.flags.num))
    return None, tuple(key)   # (a length of its own: only two distinct arrays make 6)


def _tensor_arrays(objects: tuple, args: tuple):
    """``(arrays, args)`` with each CPU tensor among ``objects`` replaced by its numpy view
    (``cpu_tensor_array``) in both; None unless ``objects`` hold a tensor and every object
    is None, a numpy array or such a tensor passed to ``make`` as an argument of its own."""
    arrays, swapped = [], {}
    for obj in objects:
        if obj is None or type(obj) is _ndarray:
            arrays.append(obj)
            continue
        array = swapped.get(id(obj))
        if array is None:
            array = cpu_tensor_array(obj)
            if array is None or not any(arg is obj for arg in args):
                return None
            swapped[id(obj)] = array
        arrays.append(array)
    if not swapped:
        return None
    return tuple(arrays), tuple(swapped.get(id(arg), arg) for arg in args)


class _Bound:
    """A kept kind with the arrays of one call (``run()`` and ``start()`` as a plan's)."""

    __slots__ = ("kind", "objects")

    def __init__(self, kind, objects) -> None:
        self.kind, self.objects = kind, objects

    def run(self) -> None:
        self.kind.run(self.objects)

    def start(self, _objects=None):
        return self.kind.start(self.objects)


def _disjoint(objects: tuple, exact: bool = False) -> bool:
    """Whether the distinct arrays among ``objects`` surely share no memory: two that own
    their memory never do; others are asked ``np.may_share_memory`` (``exact``:
    ``np.shares_memory``, for the first call of a kind)."""
    arrays = []
    for obj in objects:
        if obj is not None and all(obj is not seen for seen in arrays):
            arrays.append(obj)
    if len(arrays) < 2:
        return True
    test = np.shares_memory if exact else np.may_share_memory
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            if a.flags.num & b.flags.num & _OWNDATA:
                continue
            if test(a, b):
                return False
    return True


def _state(obj) -> tuple:
    """What validation read from a numpy array or tensor that can change on the same
    object: dtype, shape and flags (``flags.num``: writability and contiguity among them)
    of an array; dtype, shape, storage address, contiguity and whether on the CPU of a
    tensor (moving one to another device changes its address).  Dtypes are matched by
    identity first (numpy's dtype equality costs a microsecond; an array's dtype object
    only changes when a new dtype is assigned): the one- and two-array matchers match by
    identity only, so an equal dtype assigned anew is a miss and takes the full path."""
    if type(obj) is _ndarray:
        return obj.dtype, obj.shape, obj.flags.num
    return obj.dtype, obj.shape, obj.data_ptr(), obj.is_contiguous(), obj.is_cpu


def _matcher(objects: tuple):
    """A function telling whether a call's ``objects`` are these very objects, each in the
    state ``_state`` sees now (for the argument lists ``_Entry`` does not write out)."""
    states = [None if obj is None else _state(obj) for obj in objects]

    def same(given: tuple) -> bool:
        if len(given) != len(objects):
            return False
        for old, obj, seen in zip(objects, given, states):
            if old is not obj or seen is not None and _state(obj) != seen:
                return False
        return True
    return same


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
