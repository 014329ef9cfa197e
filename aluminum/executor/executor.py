"""``Executor``: runs a program's ops one after the other over a ``Scope``: the
correctness reference the parallel executors are compared with."""
from __future__ import annotations

import functools
import reprlib
import threading

import numpy as np

import aluminum as al

from .errors import ExecutionError, ProgramError
from .ir import Operator, Program
from .ops import registry
from .program_check import check_program
from .scope import Scope, global_scope


def run_op(op: Operator, scope: Scope, place: str = "cpu", stream: str = "compute",
           context=None) -> None:
    """Run one op: read its inputs from ``scope``, write its outputs there; ``context``
    gives kernels what they need beyond their inputs (the communicator of communication
    ops).  With ``AL_TRACE`` set, its span goes to the Chrome trace (op type, place, stream,
    thread)."""
    kind = registry.get(op.type)
    if al.trace.ENABLED:
        start = al.trace.now_us()
        _execute(kind, op, op.inputs.items(), op.outputs.items(), scope, place, context)
        _span(op.type, start, place, stream)
    else:
        _execute(kind, op, op.inputs.items(), op.outputs.items(), scope, place, context)


class _Communicating:
    """What a sharded program's communication ops get from an ``Executor``: the program's
    communicator, and no buckets (its ``allreduce`` ops sum each gradient in a copy)."""

    buckets = None

    def __init__(self, comm) -> None:
        self.comm = comm


class PreparedOp:
    """``run_op`` for an op run many times: its kind is looked up and its slots listed once,
    and it is bound to its scope, place, stream name, context and output destinations (or
    its kind binds it, ``OpKind.bind``, where no destinations are asked for); ``run()``
    runs it.  The program must not change after, and whether spans are traced is
    decided here.

    ``out``: arrays some outputs must end up in (``Destinations``, numpy arrays): the kernel
    is asked to write them there, and what it returned elsewhere is copied in, so after
    ``run()`` the scope holds the destination array itself under that output's name.  An
    output whose value cannot go there (another shape or dtype, a cupy array) is stored as
    it is."""

    __slots__ = ("op", "run")

    def __init__(self, op: Operator, scope: Scope, place: str, stream: str, context,
                 out: registry.Destinations = registry.ANYWHERE) -> None:
        self.op = op
        inputs = tuple((slot, tuple(names)) for slot, names in op.inputs.items())
        outputs = tuple((slot, tuple(names)) for slot, names in op.outputs.items())
        kind = registry.get(op.type)
        bound = None if out else kind.bind(op, scope, context)
        if bound is not None:
            execute = functools.partial(_execute_bound, bound, op, place)
        elif out:
            moves = tuple((slot, index, name, destination)
                          for slot, names in outputs
                          for index, (name, destination) in enumerate(
                              zip(names, out.slots.get(slot, ())))
                          if name and destination is not None)
            execute = functools.partial(_execute_into, kind, op, inputs, outputs, scope,
                                        place, context, out, moves)
        else:
            execute = functools.partial(_execute, kind, op, inputs, outputs, scope, place,
                                        context)
        if al.trace.ENABLED:
            def traced() -> None:
                start = al.trace.now_us()
                execute()
                _span(op.type, start, place, stream)
            self.run = traced
        else:
            self.run = execute


def fetch_value(name: str, scope: Scope, place: str = "cpu", stream: str = "fetch"):
    """A numpy copy of ``scope[name]``: a cupy array is copied to the host on the current
    cupy stream.  Traced like an op (``fetch``) under ``AL_TRACE``."""
    start = al.trace.now_us() if al.trace.ENABLED else None
    value = scope[name]
    copy = value.get() if is_cupy(value) else np.array(value)
    if start is not None:
        _span("fetch", start, place, stream)
    return copy


def _span(name: str, start: float, place: str, stream: str) -> None:
    al.trace.span(name, "executor", start, al.trace.now_us(),
                  {"place": place, "stream": stream,
                   "thread": threading.current_thread().name})


def _execute(kind, op: Operator, inputs, outputs, scope: Scope, place: str, context,
             out: registry.Destinations = registry.ANYWHERE) -> dict:
    """Read ``inputs`` ((slot, names) pairs) from ``scope``, compute, write ``outputs``;
    return what the kernel returned."""
    ins = {slot: [scope[name] if name else None for name in names] for slot, names in inputs}
    try:
        outs = kind.compute(ins, op.attrs, context, out)
    except Exception as exc:  # noqa: BLE001 - any kernel failure names its op
        raise _failed(op, place, exc) from exc
    for slot, names in outputs:
        for name, value in zip(names, outs.get(slot, ())):
            if name and value is not None:
                scope[name] = value
    return outs


def _execute_bound(bound, op: Operator, place: str) -> None:
    """Run an op its kind bound (``OpKind.bind``), its failure named as ``_execute``
    names a kernel's."""
    try:
        bound()
    except Exception as exc:  # noqa: BLE001 - any kernel failure names its op
        raise _failed(op, place, exc) from exc


def _failed(op: Operator, place: str, exc: Exception) -> ExecutionError:
    return ExecutionError(f"op {op.type} on {place} failed: {type(exc).__name__}: {exc}")


def _execute_into(kind, op: Operator, inputs, outputs, scope: Scope, place: str, context,
                  out: registry.Destinations, moves: tuple) -> None:
    """``_execute``, then each output of ``moves`` ((slot, index, name, destination)) that
    the kernel returned elsewhere copied into its destination (see PreparedOp)."""
    outs = _execute(kind, op, inputs, outputs, scope, place, context, out)
    for slot, index, name, destination in moves:
        values = outs.get(slot, ())
        value = values[index] if index < len(values) else None
        if value is destination or not (type(value) is np.ndarray and
                                        value.shape == destination.shape and
                                        value.dtype == destination.dtype):
            continue
        np.copyto(destination, value)
        scope[name] = destination


def check_feed(program: Program, feed: dict, rank: int | None = None) -> None:
    """Every fed name a declared variable, fed an array (or what ``numpy.asarray`` makes a
    numeric array of) of a compatible shape and the declared dtype; in a sharded program
    (``rank`` given) a laid-out variable's shape is ``rank``'s part."""
    block = program.global_block()
    for name, value in feed.items():
        if name not in block.vars:
            raise ProgramError(f"feed {name!r}: no such variable in the program")
        var = block.vars[name]
        value = _numeric_array(name, var, value)
        shape = var.shape if rank is None or var.layout is None else \
            var.layout.local_shape(rank, var.shape)
        if len(value.shape) != len(shape) or any(
                d != -1 and d != v for d, v in zip(shape, value.shape)):
            raise ProgramError(f"feed {name!r}: expected shape {list(shape)}, got "
                               f"{list(value.shape)}")
        if value.dtype != np.dtype(var.dtype):
            raise ProgramError(f"feed {name!r}: expected dtype {var.dtype}, got {value.dtype}")


def _numeric_array(name: str, var, value):
    """``as_array(value)``, or a ``ProgramError`` if that is no numeric array (a string, a
    ragged list, a dict)."""
    try:
        array = as_array(value)
    except (TypeError, ValueError):
        array = None
    if array is None or array.dtype.kind not in "biufc":
        raise ProgramError(f"feed {name!r}: expected an array of {var.dtype} with shape "
                           f"{list(var.shape)}, got {type(value).__name__} "
                           f"{reprlib.repr(value)}")
    return array


def check_readable(program: Program, feed: dict, scope: Scope) -> None:
    """Every variable an op reads is written earlier, fed, or already in the scope."""
    available = set(feed) | set(scope)
    for op in program.global_block().ops:
        for name in op.input_names():
            if name and name not in available:
                raise ProgramError(f"op {op.type}: reads variable {name!r}, which nothing "
                                   "writes before it (not fed, not in the scope)")
        available.update(op.output_names())


def is_cupy(value) -> bool:
    return type(value).__module__.startswith("cupy")


def as_array(value):
    """``value`` itself if it is a cupy array (it stays on the device), else
    ``numpy.asarray(value)``."""
    return value if is_cupy(value) else np.asarray(value)


def store_feed(scope: Scope, feed: dict) -> None:
    """Write the (checked) feed into ``scope`` (see ``as_array``)."""
    for name, value in feed.items():
        scope[name] = as_array(value)


def fetch_names(fetch_list) -> list[str]:
    return [f if isinstance(f, str) else f.name for f in (fetch_list or [])]


def check_fetch(program: Program, names: list[str]) -> None:
    for name in names:
        if name not in program.global_block().vars:
            raise ProgramError(f"fetch {name!r}: no such variable in the program")


class Executor:
    """Sequential interpreter; ``place`` is a label for errors ("cpu").  ``check_nan_inf``:
    check every float feed and every op's float outputs for NaN and Inf (see
    nan_inf.py); off by default."""

    def __init__(self, place: str = "cpu", check_nan_inf: bool = False) -> None:
        self.place = place
        self.check_nan_inf = check_nan_inf

    def run(self, program: Program, feed: dict | None = None, fetch_list=None,
            scope: Scope | None = None) -> list[np.ndarray]:
        """Run every op of ``program`` in order; return copies of the fetched values.
        Everything is checked before the first op runs (the whole program, as
        ``check_program``, then the feed and fetch list): a ``ProgramError`` leaves the
        scope as it was.  A placed program (``place``) runs this rank's ops only, with its
        transfers (placement/runtime.py); a value fetched that this rank does not hold
        comes back as None."""
        scope = global_scope() if scope is None else scope
        check_program(program)
        if getattr(program, "cluster", None) is not None:
            from .placement.runtime import run_placed
            return run_placed(self, program, feed, fetch_list, scope)
        feed = dict(feed or {})
        names = fetch_names(fetch_list)
        rank = context = None
        if getattr(program, "sharding", None) is not None:   # sharding/: each rank's part
            from .sharding import local_feed, local_scope
            rank = program.sharding.comm.rank
            context = _Communicating(program.sharding.comm)
            feed = local_feed(program, feed, rank)
            local_scope(program, scope, rank)
        check_feed(program, feed, rank)
        check_fetch(program, names)
        check_readable(program, feed, scope)
        if self.check_nan_inf:
            from .nan_inf import check_feed_finite, check_outputs_finite
            check_feed_finite(feed)
            store_feed(scope, feed)
            for op in program.global_block().ops:
                run_op(op, scope, self.place, context=context)
                check_outputs_finite(op, scope, self.place)
        else:
            store_feed(scope, feed)
            for op in program.global_block().ops:
                run_op(op, scope, self.place, context=context)
        return [fetch_value(name, scope, self.place) for name in names]
