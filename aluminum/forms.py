"""The three public calls of an operation, written out from its row of the op table.

Every operation is called three ways with the same arguments: ``al.<op>`` (blocking),
``al.nonblocking_<op>`` (returns a ``Request``) and ``al.<op>_init`` (validates once, returns
a persistent ``Plan``).  aluminum/calls.py holds all three of every operation, written by
``calls_source()`` from the op table (aluminum/core/ops.py: each row's arguments, ``root``,
``op``, ``recvbuf``), so that they cannot drift apart; ``public_forms`` hands each operation's
module its three calls, with the operation's own checks of its buffers:

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

What surprises people: aluminum/calls.py is generated - edit the op table or this module,
then run ``python -m aluminum.forms`` to write it again (tests/test_op_table.py fails while
it differs from what the table gives).  It is a file rather than source text compiled at
import so that the install compiles it with the rest of the hot path
(aluminum/core/compiled.py): each call is then a C function with an explicit signature
(``help(al.allreduce)`` and ``inspect.signature`` show it) that reaches the plan cache in C.
A generic ``*args`` wrapper would cost every small call a Python call and an argument tuple
more.  Each call's ``__module__`` is its operation's module, where it is importable.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, NamedTuple

from . import calls
from .core.ops import OPS, OpSpec, spec
from .plan import Plan
from .validate import Checked, check_comm, check_stream, table_arguments

__all__ = ["OpCalls", "calls_of", "public_forms", "calls_source"]

NONBLOCKING_DOC = """Start ``{name}`` and return a ``Request``; its buffers must not be touched
    until it completes (``req.wait()`` or ``req.test()``)."""
INIT_DOC = """Validate ``{name}`` once; return its persistent ``Plan`` (``start()`` runs it
    nonblocking, ``run()`` blocking, always on the buffers given here)."""
CALLS_FILE = Path(__file__).with_name("calls.py")


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
    """``(<op>, nonblocking_<op>, <op>_init)`` of ``row``'s operation, for ``module``
    (``__name__`` of the caller) with the docstrings given (``{name}`` is the op's name).

    ``checks(comm=..., **arguments)`` is the operation's own validation: it gets the row's
    arguments by name, checked by ``validate.table_arguments``, without ``stream`` and
    ``algo``, and returns a ``Checked``.  ``call``, for an operation whose buffers are not
    arguments of their own (``row.paired``: multisendrecv's lists of pairs), replaces
    the plan-cache call: ``call(call_blocking or call_nonblocking, name, make, *arguments)``."""
    if (call is not None) != row.paired:
        raise TypeError(f"{row.name}: a custom call is given exactly for the rows whose "
                        f"buffers are not arguments of their own")
    setattr(calls, f"make_{row.name}", _plan_maker(row, checks, _parameter_names(row)))
    if call is not None:
        setattr(calls, f"call_{row.name}", call)
    forms = _CALLS[row.name] = OpCalls(*(getattr(calls, name, None) or _not_written(name)
                                         for name in _names(row)))
    for function, text in zip(forms, (doc, nonblocking_doc, init_doc)):
        function.__doc__ = text.replace("{name}", row.name)
        function.__module__ = module
    return forms


CALLS_DOC = """Every operation's three public calls: ``al.<op>``, ``al.nonblocking_<op>``,
``al.<op>_init``.

Written by ``python -m aluminum.forms`` from the op table (aluminum/core/ops.py); do not
edit.  Each operation's module (aluminum/allreduce.py, ...) gives them their docstrings and
plan makers (``forms.public_forms``) and is where they are documented and imported from.
"""


def calls_source() -> str:
    """The text of aluminum/calls.py: every row's three calls, in the op table's order."""
    made = "\n".join(f"make_{row.name} = None" for row in OPS.values())
    custom = "\n".join(f"call_{row.name} = None" for row in OPS.values() if row.paired)
    return (f'"""{CALLS_DOC}"""\n'
            "from .core.reduction import ReductionOp\n"
            "from .recall import call_blocking, call_nonblocking, layout, ran_known, "
            "started_known\n\n"
            "SUM = ReductionOp.SUM\n\n"
            "# Set by each operation's module (forms.public_forms): the function that validates "
            "a\n# call and makes its Plan, and the custom call of a row whose buffers are not "
            "arguments.\n"
            f"{made}\n{custom}\n\n\n"
            + "\n\n".join(_source(row, _parameter_names(row)) for row in OPS.values()))


def _not_written(name: str) -> Callable:
    """A stand-in for a call aluminum/calls.py lacks (an op table changed since it was
    written), so that aluminum still imports and ``python -m aluminum.forms`` can write it."""
    def not_written(*args, **kwargs):
        raise ImportError(f"aluminum/calls.py has no {name}: the op table changed since it "
                          f"was written; write it again with `python -m aluminum.forms`")
    not_written.__qualname__ = not_written.__name__ = name
    return not_written


def _names(row: OpSpec) -> tuple[str, str, str]:
    return row.name, f"nonblocking_{row.name}", f"{row.name}_init"


def _parameter_names(row: OpSpec) -> tuple[str, ...]:
    """The public calls' parameters in order."""
    return (*row.arguments, "comm", "stream", *(("root",) if row.rooted else ()),
            *(("op",) if row.reduction else ()),
            *(("recvbuf",) if row.keyword_recvbuf else ()), "algo")


def _source(row: OpSpec, names: tuple[str, ...]) -> str:
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
    make = f"make_{row.name}"
    if row.paired:
        blocking = [_wrap(4, f"call_{row.name}", ["call_blocking", repr(row.name), make, *names])]
        nonblocking = [_wrap(4, f"return call_{row.name}",
                             ["call_nonblocking", repr(row.name), make, *names])]
    else:
        options = [*row.peers, *(name for name in ("root", "op") if name in names), "algo",
                   *(f"layout({name})" for name in row.layouts)]
        shared = [repr(row.name), _tuple(row.buffers), "comm", "stream", _tuple(options),
                  make, *names]
        blocking = [_wrap(4, "call_blocking", shared)]
        nonblocking = [_wrap(4, "return call_nonblocking", shared)]
        if len(row.buffers) <= 2 and len(options) <= 3:
            latest = [repr(row.name), str(len(row.buffers)), *[*row.buffers, "None", "None"][:2],
                      "comm", "stream", str(len(options)), *[*options, "None", "None"][:3]]
            blocking = [_wrap(4, "if not ran_known", latest, ":"),
                        _wrap(8, "call_blocking", shared)]
            nonblocking = [_wrap(4, "request = started_known", latest),
                           "    if request is not None:", "        return request", *nonblocking]
    definitions = ((row.name, blocking), (f"nonblocking_{row.name}", nonblocking),
                   (f"{row.name}_init", [_wrap(4, f"return {make}", names, ".prepare()")]))
    return "\n\n".join("\n".join([_wrap(0, f"def {name}", declared, ":"), *body]) + "\n"
                        for name, body in definitions)


def _wrap(indent: int, head: str, items, tail: str = "") -> str:
    """``head(items...)tail`` at ``indent`` spaces, its items continued under the first
    where the line would pass 100 characters."""
    lines = [" " * indent + head + "("]
    items = [piece for item in items for piece in _pieces(item)]
    for index, item in enumerate(items):
        text = item + (", " if index < len(items) - 1 else ")" + tail)
        if len(lines[-1]) + len(text.rstrip()) > 100:
            lines[-1] = lines[-1].rstrip()
            lines.append(" " * (indent + len(head) + 1))
        lines[-1] += text
    return "\n".join(lines)


def _pieces(item: str) -> list[str]:
    """``item``, or a tuple's text too long for a line as its items, to be joined by ", "."""
    if len(item) <= 60 or not item.startswith("("):
        return [item]
    parts = item[1:-1].split(", ")
    return ["(" + parts[0], *parts[1:-1], parts[-1] + ")"]


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


if __name__ == "__main__":    # python -m aluminum.forms: write aluminum/calls.py again
    text = calls_source()
    if CALLS_FILE.read_text() == text:   # (left alone: its extension stays up to date)
        print(f"{CALLS_FILE} is what the op table gives", file=sys.stderr)
    else:
        CALLS_FILE.write_text(text)
        print(f"wrote {CALLS_FILE}; `pip install -e .` compiles it", file=sys.stderr)
