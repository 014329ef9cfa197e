"""The three public calls of an operation, made from its row of the op table.

Every operation is called three ways with the same arguments: ``al.<op>`` (blocking),
``al.nonblocking_<op>`` (returns a ``Request``) and ``al.<op>_init`` (validates once, returns
a persistent ``Plan``).  ``public_forms`` makes the three from the operation's row
(aluminum/core/ops.py: its arguments, ``root``, ``op``, ``recvbuf``) and the operation's own
checks of its buffers, so that they cannot drift apart:

- the blocking and nonblocking calls hand the row's buffers and every other argument to the
  plan cache (``recall.call_blocking`` / ``call_nonblocking``), with the function that
  validates and builds the plan where nothing is remembered; a call of at most two
  buffers and three options first asks ``recall.ran_known`` (blocking) or
  ``recall.started_known`` (nonblocking) to run or start it - the op's latest call again,
  or new arrays of a kept kind - passing them as they are (one lookup, no argument
  tuples);
- that function checks the communicator, then what the row's facts call for
  (``validate.table_arguments``: root, peers, layouts, reduction op), then runs the
  operation's own checks (which return a ``validate.Checked``), then the stream, and builds
  the ``Plan`` under the row's name.

What surprises people: the three calls are compiled from source text, as ``dataclasses`` and
``namedtuple`` make their methods, so that each is a plain function with an explicit signature
(``help(al.allreduce)`` and ``inspect.signature`` show it) that costs no more than a
hand-written one; a generic ``*args`` wrapper would cost every small call a Python call and
an argument tuple more.  Their ``__module__`` is the operation's module, ``__qualname__`` the
call's name; a traceback through them shows their source as
``<aluminum.forms: the calls of allreduce>``.
"""
from __future__ import annotations

import linecache
from typing import Callable, NamedTuple

from .core.ops import OpSpec, spec
from .core.reduction import ReductionOp
from .engine import Request
from .plan import Plan
from .recall import call_blocking, call_nonblocking, layout, ran_known, started_known
from .validate import Checked, check_comm, check_stream, table_arguments

__all__ = ["OpCalls", "calls_of", "public_forms"]

NONBLOCKING_DOC = """Start ``{name}`` and return a ``Request``; its buffers must not be touched
    until it completes (``req.wait()`` or ``req.test()``)."""
INIT_DOC = """Validate ``{name}`` once; return its persistent ``Plan`` (``start()`` runs it
    nonblocking, ``run()`` blocking, always on the buffers given here)."""


class OpCalls(NamedTuple):
    """An operation's three public calls: ``al.<op>``, ``al.nonblocking_<op>``,
    ``al.<op>_init``."""
    blocking: Callable
    nonblocking: Callable
    init: Callable


_CALLS: dict[str, OpCalls] = {}


def calls_of(op: str | OpSpec) -> OpCalls:
    """The three public calls of operation ``op`` (its name in ``al.OPS``, or its row), for
    code that picks an operation at run time (the torch backend); ``al.ArgumentError``
    naming the operations for a name the op table lacks."""
    return _CALLS[spec(op.name if isinstance(op, OpSpec) else op).name]


def public_forms(row: OpSpec, checks: Callable[..., Checked], module: str, doc: str, *,
                 nonblocking_doc: str = NONBLOCKING_DOC, init_doc: str = INIT_DOC,
                 call: Callable | None = None) -> OpCalls:
    """``(<op>, nonblocking_<op>, <op>_init)`` of ``row``'s operation, defined in ``module``
    (``__name__`` of the caller) with the docstrings given (``{name}`` is the op's name).

    ``checks(comm=..., **arguments)`` is the operation's own validation: it gets the row's
    arguments by name, checked by ``validate.table_arguments``, without ``stream`` and
    ``algo``, and returns a ``Checked``.  ``call``, for an operation whose buffers are not
    arguments of their own (multisendrecv: lists of pairs), replaces the plan-cache call:
    ``call(call_blocking or call_nonblocking, name, make, *arguments)``."""
    names = _parameter_names(row)
    namespace = {"__name__": module, "call_blocking": call_blocking, "ran_known": ran_known,
                 "started_known": started_known,
                 "call_nonblocking": call_nonblocking, "layout": layout,
                 "make": _plan_maker(row, checks, names), "call": call, "SUM": ReductionOp.SUM,
                 "Plan": Plan, "Request": Request}
    source = _source(row, names, custom_call=call is not None)
    filename = f"<aluminum.forms: the calls of {row.name}>"   # tracebacks show its lines
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)   # noqa: S102
    forms = _CALLS[row.name] = OpCalls(namespace[row.name],
                                       namespace[f"nonblocking_{row.name}"],
                                       namespace[f"{row.name}_init"])
    for function, text in zip(forms, (doc, nonblocking_doc, init_doc)):
        function.__doc__ = text.replace("{name}", row.name)
    return forms


def _parameter_names(row: OpSpec) -> tuple[str, ...]:
    """The public calls' parameters in order."""
    return (*row.arguments, "comm", "stream", *(("root",) if row.rooted else ()),
            *(("op",) if row.reduction else ()),
            *(("recvbuf",) if row.keyword_recvbuf else ()), "algo")


def _source(row: OpSpec, names: tuple[str, ...], custom_call: bool) -> str:
    """The three ``def``s of ``row``'s operation."""
    declared = [f"{name}: int" if name in row.peers else name for name in row.arguments]
    declared += ["comm", "stream=None", "*"]
    if row.rooted:
        declared.append("root: int = 0")
    if row.reduction:
        declared.append("op=SUM")
    if row.keyword_recvbuf:
        declared.append("recvbuf=None")
    declared.append('algo: str = "automatic"')
    parameters = ", ".join(declared)
    passed = ", ".join(names)
    if custom_call:
        blocking = f"call(call_blocking, {row.name!r}, make, {passed})"
        nonblocking = f"return call(call_nonblocking, {row.name!r}, make, {passed})"
    else:
        options = [*row.peers, *(name for name in ("root", "op") if name in names), "algo",
                   *(f"layout({name})" for name in row.layouts)]
        shared = f"{_tuple(row.buffers)}, comm, stream, {_tuple(options)}, make, {passed}"
        blocking = f"call_blocking({row.name!r}, {shared})"
        started = f"call_nonblocking({row.name!r}, {shared})"
        nonblocking = f"return {started}"
        if len(row.buffers) <= 2 and len(options) <= 3:
            pair = [*row.buffers, "None", "None"][:2]
            latest = ", ".join([*pair, "comm", "stream", str(len(options)),
                                *[*options, "None", "None"][:3]])
            blocking = (f"if not ran_known({row.name!r}, {len(row.buffers)}, {latest}):\n"
                        f"        {blocking}")
            nonblocking = (f"request = started_known({row.name!r}, {len(row.buffers)}, "
                           f"{latest})\n"
                           f"    return {started} if request is None else request")
    return (f"def {row.name}({parameters}) -> None:\n"
            f"    {blocking}\n\n"
            f"def nonblocking_{row.name}({parameters}) -> Request:\n"
            f"    {nonblocking}\n\n"
            f"def {row.name}_init({parameters}) -> Plan:\n"
            f"    return make({passed}).prepare()\n")


def _tuple(items) -> str:
    items = list(items)
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _plan_maker(row: OpSpec, checks: Callable[..., Checked], names: tuple[str, ...]):
    """The function that validates a call of ``row``'s operation and builds its ``Plan``
    (called with the public parameters in order, where the plan cache finds nothing)."""
    def make(*values) -> Plan:
        arguments = dict(zip(names, values))
        comm = check_comm(arguments.pop("comm"))
        stream, algo = arguments.pop("stream"), arguments.pop("algo")
        table_arguments(row, comm, arguments)
        checked = checks(comm=comm, **arguments)
        return Plan(comm, row.name, algo, checked.nbytes,
                    (check_stream(stream, comm), *checked.args), inplace=checked.inplace)
    make.__qualname__ = make.__name__ = f"make_{row.name}_plan"
    return make
