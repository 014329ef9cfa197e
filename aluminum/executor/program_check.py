"""Checking a program before it runs: the JSON text a program is loaded from
(``parse_program_json``) and the program itself, built, loaded or edited by hand
(``check_program``).  Both raise ``ProgramError`` naming the field or op, what was expected
and what was given; neither changes anything.

``Program.from_json`` runs both, so a loaded program is checked as a built one is.
``Executor.run`` runs ``check_program`` before the first op of every run, and
``ParallelExecutor`` once, when it is made: an unknown op type at the end of a program fails
before any parameter is updated.

Limits on program text (what surprises people: they are on the text, not on the program):
at most ``MAX_PROGRAM_CHARS`` characters (64 Mi: about 170,000 ops as ``to_json`` writes
them, 100,000 ops being 38.5 Mi; the length is compared before parsing, so a longer text
costs nothing), and each attr value nested at most ``MAX_NESTING`` levels (the program
around it is 6 deep; text nested too deep for the parser, about 1,000 levels, is refused
naming the same limit, never with a RecursionError).  Loading and checking is linear in
the text: 100,000 ops take 2-5 s and about 0.5 GB on one core of the shared 2-core VM.
"""
from __future__ import annotations

import json
import reprlib
import weakref
from dataclasses import fields

import numpy as np

from .errors import ProgramError
from .ir import FORMAT, PlaceGroup, Variable
from .ops import registry

MAX_PROGRAM_CHARS = 64 * 2 ** 20
MAX_NESTING = 32

_given = reprlib.Repr()
_given.maxlevel, _given.maxstring, _given.maxother = 3, 60, 60
_PROGRAM_FIELDS = ("format", "random_seed", "blocks")
_BLOCK_FIELDS = ("idx", "vars", "ops")
_OP_FIELDS = ("type", "inputs", "outputs", "attrs", "place")
_VAR_FIELDS = tuple(f.name for f in fields(Variable))
_PLACE_FIELDS = tuple(f.name for f in fields(PlaceGroup))
_passed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # program -> _outline


def parse_program_json(text) -> dict:
    """The dict ``text`` holds, checked field by field against the format ``to_json``
    writes: every field present, no other, each of its type (a variable's dtype a numeric
    numpy dtype, its shape integers >= -1, names unique)."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise ProgramError(f"program: expected JSON text (str or bytes), got "
                           f"{type(text).__name__}")
    if len(text) > MAX_PROGRAM_CHARS:
        raise ProgramError(f"program: expected at most {MAX_PROGRAM_CHARS} characters of "
                           f"JSON, got {len(text)}")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ProgramError(f"program: expected JSON nested at most {MAX_NESTING} levels "
                           "deep, got more") from None
    except ValueError as exc:   # JSONDecodeError, UnicodeDecodeError
        raise ProgramError(f"program: expected JSON text, got text that does not parse: "
                           f"{exc}") from None
    _object(data, "program", _PROGRAM_FIELDS, first="format")
    if data["format"] != FORMAT:
        raise ProgramError(f"program.format: expected {FORMAT!r}, got "
                           f"{_given.repr(data['format'])}")
    _integer(data["random_seed"], "program.random_seed")
    blocks = _list(data["blocks"], "program.blocks")
    if not blocks:
        raise ProgramError("program.blocks: expected at least one block, got []")
    for position, block in enumerate(blocks):
        _block(block, f"blocks[{position}]", position)
    return data


def check_program(program) -> None:
    """Every variable's dtype a numeric numpy dtype and its shape integers >= -1; every
    op's type known, the variables it reads and writes declared, and its inputs accepted
    by its shape inference, which must give the shapes and dtypes its outputs are declared
    with (-1 agrees with any size).  Inference runs on copies: the program is unchanged.

    A program that passed is remembered (weakly) with its ops and its number of variables,
    and checked again only when those change (an op added, removed, replaced or given
    another type): ``Executor.run`` calls this on every run, and the full check costs
    about as much as a run of small ops.  What surprises people: an edit inside an op
    (its slots, attrs) or a variable (shape, dtype) after a run is not noticed."""
    outline = _outline(program)
    if not _same(_passed.get(program), outline):
        _check(program)
        _passed[program] = outline


def _outline(program) -> list:
    """What ``check_program`` compares to see whether a program changed: per block, its
    number of variables, its ops (held, so that a new op cannot reuse a freed one's id)
    and their types."""
    return [(len(block.vars), list(block.ops), [op.type for op in block.ops])
            for block in program.blocks]


def _same(before: list | None, now: list) -> bool:
    """Outlines alike, ops compared by identity (an op's ``==`` compares its attrs)."""
    return before is not None and len(before) == len(now) and all(
        count == count_now and types == types_now and len(ops) == len(ops_now)
        and all(a is b for a, b in zip(ops, ops_now))
        for (count, ops, types), (count_now, ops_now, types_now) in zip(before, now))


def _check(program) -> None:
    for block in program.blocks:
        declared = block.vars
        for name, var in declared.items():
            _shape(var.shape, f"blocks[{block.idx}].vars[{name!r}]", "shape")
            _dtype(var.dtype, f"blocks[{block.idx}].vars[{name!r}]", "dtype")
        inferred = _Inferred(block)
        for index, op in enumerate(block.ops):
            try:
                kind = registry.get(op.type)
                outputs = op.output_names()
                for role, names in (("input", op.input_names()), ("output", outputs)):
                    for name in names:
                        if name and name not in declared:   # "": a gradient nobody computed
                            raise ProgramError(f"op {op.type}: {role} variable {name!r} is "
                                               "not declared")
                try:
                    kind.infer(inferred, op)
                except ProgramError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a hand-made op missing a slot
                    raise ProgramError(f"op {op.type}: shape inference failed: "
                                       f"{type(exc).__name__}: {exc}") from None
                for name in outputs:
                    _agrees(inferred.vars.get(name), declared.get(name), op)
            except ProgramError as exc:
                raise ProgramError(f"blocks[{block.idx}].ops[{index}]: {exc}") from None


class _Inferred:
    """What shape inference writes to in ``check_program``: each of the block's variables
    copied the first time an op asks for it, so the inferred shapes flow from op to op
    without touching the program."""

    def __init__(self, block) -> None:
        self.block, self.vars = block, {}

    def var(self, name: str) -> Variable:
        var = self.vars.get(name)
        if var is None:   # a shallow copy (copy.copy takes 4x as long)
            declared = self.block.var(name)
            var = self.vars[name] = object.__new__(type(declared))
            var.__dict__.update(declared.__dict__)
        return var


def _agrees(inferred: Variable | None, declared: Variable | None, op) -> None:
    if inferred is None or declared is None:   # inference left it alone (updates in place)
        return
    if inferred.shape == declared.shape and inferred.dtype == declared.dtype:
        return
    shapes_agree = len(inferred.shape) == len(declared.shape) and all(
        a == b or -1 in (a, b) for a, b in zip(inferred.shape, declared.shape))
    if not shapes_agree or np.dtype(inferred.dtype) != np.dtype(declared.dtype):
        raise ProgramError(f"op {op.type}: output {declared.name!r} is declared "
                           f"{declared.dtype} {list(declared.shape)}, shape inference gives "
                           f"{inferred.dtype} {list(inferred.shape)}")


# -- the fields of program JSON -------------------------------------------------------------

def _block(block, where: str, position: int) -> None:
    _object(block, where, _BLOCK_FIELDS)
    if _integer(block["idx"], f"{where}.idx") != position:
        raise ProgramError(f"{where}.idx: expected {position}, got {block['idx']}")
    names = set()
    for i, var in enumerate(_list(block["vars"], f"{where}.vars")):
        at = f"{where}.vars[{i}]"
        if isinstance(var, dict):   # written before layouts existed: none
            var.setdefault("layout", None)
        _object(var, at, _VAR_FIELDS)
        for key, value in var.items():
            _VAR_FIELD_CHECKS.get(key, _nesting)(value, at, key)
        if var["name"] in names:
            raise ProgramError(f"{at}.name: {var['name']!r} is declared twice")
        names.add(var["name"])
    for i, op in enumerate(_list(block["ops"], f"{where}.ops")):
        at = f"{where}.ops[{i}]"
        _object(op, at, _OP_FIELDS)
        _name(op["type"], at, "type")
        _slots(op["inputs"], at, "inputs")
        _slots(op["outputs"], at, "outputs")
        attrs = _object(op["attrs"], f"{at}.attrs", None)
        for key, value in attrs.items():
            _nesting(value, at, f"attrs[{key!r}]")
        _place(op["place"], at, "place")


def _object(value, where: str, expected: tuple | None, first: str | None = None) -> dict:
    """``value`` a JSON object with exactly the fields ``expected`` (any, if None);
    ``first`` is looked for before the others (the format, so a wrong version says so)."""
    if not isinstance(value, dict):
        raise ProgramError(f"{where}: expected a JSON object, got {type(value).__name__}")
    if expected is None:
        return value
    listed = ", ".join(expected)
    for key in ((first,) if first else ()) + expected:
        if key not in value:
            raise ProgramError(f"{where}: missing field {key!r} (expected the fields "
                               f"{listed})")
    for key in value:
        if key not in expected:
            raise ProgramError(f"{where}: unknown field {_given.repr(key)} (expected the "
                               f"fields {listed})")
    return value


def _list(value, where: str) -> list:
    if not isinstance(value, list):
        raise ProgramError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _integer(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProgramError(f"{where}: expected an integer, got {_given.repr(value)}")
    return value


# Each check of a field takes (value, where, field) and names ``where.field`` when the value
# is wrong (the name is only formatted then: a program has hundreds of thousands of fields).

def _boolean(value, where: str, field: str) -> None:
    if not isinstance(value, bool):
        raise ProgramError(f"{where}.{field}: expected true or false, got "
                           f"{_given.repr(value)}")


def _name(value, where: str, field: str) -> None:
    if not isinstance(value, str) or not value:
        raise ProgramError(f"{where}.{field}: expected a non-empty string, got "
                           f"{_given.repr(value)}")


def _shape(value, where: str, field: str) -> None:
    if not isinstance(value, (list, tuple)) or not all(
            type(d) is int and d >= -1 for d in value):
        raise ProgramError(f"{where}.{field}: expected a list of integers >= -1, got "
                           f"{_given.repr(value)}")


def _dtype(value, where: str, field: str) -> None:
    try:
        numeric = np.dtype(value).kind in "biufc"
    except (TypeError, ValueError):
        numeric = False
    if not numeric or not isinstance(value, (str, type, np.dtype)):
        raise ProgramError(f"{where}.{field}: expected a numeric numpy dtype name (such as "
                           f"'float32'), got {_given.repr(value)}")


def _slots(value, where: str, field: str) -> None:
    if not isinstance(value, dict) or not all(
            type(names) is list and all(type(n) is str for n in names)
            for names in value.values()):
        raise ProgramError(f"{where}.{field}: expected an object of slot -> list of "
                           f"variable names, got {_given.repr(value)}")


def _place(value, where: str, field: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or set(value) != set(_PLACE_FIELDS) or not all(
            type(v) is list and all(type(s) is str for s in v) for v in value.values()):
        raise ProgramError(f"{where}.{field}: expected null or an object with "
                           f"{', '.join(_PLACE_FIELDS)} (lists of strings), got "
                           f"{_given.repr(value)}")


def _layout(value, where: str, field: str) -> None:
    if value is not None:
        from .layouts.mesh import Layout
        Layout.from_dict(value, f"{where}.{field}")


def _nesting(value, where: str, field: str) -> None:
    """A JSON value nested at most ``MAX_NESTING`` levels (counted without recursion)."""
    if not isinstance(value, (list, dict)):
        return
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            depth += 1
            deepest = max(deepest, depth)
            stack.extend((child, depth) for child in
                         (item.values() if isinstance(item, dict) else item))
    if deepest > MAX_NESTING:
        raise ProgramError(f"{where}.{field}: expected JSON nested at most {MAX_NESTING} "
                           f"levels deep, got {deepest}")


_VAR_FIELD_CHECKS = {"name": _name, "shape": _shape, "dtype": _dtype,
                     "persistable": _boolean, "stop_gradient": _boolean,
                     "is_parameter": _boolean, "place": _place, "layout": _layout}
