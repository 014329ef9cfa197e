"""The program IR: ``Program`` -> blocks -> ``Operator``s over ``Variable``s (Paddle's
ProgramDesc), with an optional ``PlaceGroup`` on every variable and operator so that
placement can come later without changing the format.

A program serializes to JSON and back losslessly (``to_json``/``from_json``), prints as a
ProgramDesc-like listing (``str(program)``) and draws as Graphviz (``to_dot``).  Builders
append to the default main and startup programs; ``program_guard`` swaps them.
"""
from __future__ import annotations

import contextlib
import itertools
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Iterator

from .errors import ProgramError

FORMAT = "aluminum-program/1"


@dataclass(frozen=True)
class PlaceGroup:
    """Where something runs: roles (e.g. "trainer"), nodes and places ("cpu:0")."""

    roles: tuple = ()
    nodes: tuple = ()
    places: tuple = ()

    def __str__(self) -> str:   # the seed's form: role/node/device:[ids]
        from .placement.cluster import format_place_group
        return format_place_group(self)


@dataclass
class Variable:
    """A named tensor: ``shape`` uses -1 for the batch dimension; ``persistable`` variables
    (parameters, optimizer state) live across runs in the scope."""

    name: str
    shape: tuple = ()
    dtype: str = "float32"
    persistable: bool = False
    stop_gradient: bool = False
    place: PlaceGroup | None = None
    is_parameter: bool = False
    layout: object = None     # a layouts.Layout: how the ranks of a mesh hold the tensor


@dataclass
class Operator:
    """One op: ``inputs``/``outputs`` map slot names to lists of variable names."""

    type: str
    inputs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    place: PlaceGroup | None = None

    def input_names(self) -> list[str]:
        return [name for names in self.inputs.values() for name in names]

    def shard(self, strategy) -> Operator:
        """Set the op's MindSpore-style strategy: per input, the number of parts of each
        of its dimensions, e.g. ``((2, 1), (1, 2))`` for a matmul (see
        docs/auto_parallel.md); used in SEMI_AUTO_PARALLEL mode."""
        from .sharding.strategy import normalize_strategy
        self.attrs["shard"] = normalize_strategy(strategy, f"op {self.type}: shard")
        return self

    def output_names(self) -> list[str]:
        return [name for names in self.outputs.values() for name in names]

    def __str__(self) -> str:
        def slots(table):
            return ", ".join(f"{slot}={names}" for slot, names in table.items())
        attrs = f" {self.attrs}" if self.attrs else ""
        place = f" @ {self.place}" if self.place is not None else ""
        return f"{{{slots(self.outputs)}}} = {self.type}({slots(self.inputs)}){attrs}{place}"


class Block:
    """Variables and the ordered operators that read and write them."""

    def __init__(self, program: Program, idx: int = 0) -> None:
        self.program, self.idx = program, idx
        self.vars: dict[str, Variable] = {}
        self.ops: list[Operator] = []

    def var(self, name: str) -> Variable:
        try:
            return self.vars[name]
        except KeyError:
            raise ProgramError(f"variable {name!r}: not in block {self.idx}") from None

    def create_var(self, name: str, shape=(), dtype: str = "float32", **kwargs) -> Variable:
        if name in self.vars:
            return self.vars[name]
        variable = self.vars[name] = Variable(name, tuple(shape), dtype, **kwargs)
        variable.block = self   # not a field: not serialized
        if variable.place is None:
            variable.place = current_place
        return variable

    def append_op(self, type: str, inputs: dict, outputs: dict, attrs: dict | None = None,
                  infer: bool = True) -> Operator:
        """Append an operator, checking its type, its inputs and (``infer``) the shapes of
        its outputs; raises ``ProgramError`` naming the op and variable."""
        from .ops import registry

        op = Operator(type, {k: list(v) for k, v in inputs.items()},
                      {k: list(v) for k, v in outputs.items()}, dict(attrs or {}),
                      current_place)
        kind = registry.get(type)
        for name in op.input_names():
            if name and name not in self.vars:   # "": a gradient nobody computed
                raise ProgramError(f"op {type}: input variable {name!r} is not declared")
        for name in op.output_names():
            if name and name not in self.vars:
                raise ProgramError(f"op {type}: output variable {name!r} is not declared")
        if infer:
            kind.infer(self, op)
        self.ops.append(op)
        return op


class Program:
    """A list of blocks (block 0 is the global block)."""

    def __init__(self) -> None:
        self.blocks = [Block(self, 0)]
        self.random_seed = 0

    def global_block(self) -> Block:
        return self.blocks[0]

    def clone(self) -> Program:
        """A deep copy (not checked again: see ``from_json``); a placed program's copy
        keeps its cluster."""
        copy = Program._from_dict(json.loads(self.to_json()))
        if getattr(self, "cluster", None) is not None:   # set by placement.place
            copy.cluster = self.cluster
        return copy

    def for_rank(self, rank: int, cluster=None) -> Program:
        """What ``rank`` runs of this placed program: its ops, with the transfers the
        places imply (placement/transfers.py)."""
        from .placement.transfers import plan_transfers
        return plan_transfers(self, cluster).for_rank(rank)

    # -- serialization ------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {"format": FORMAT, "random_seed": self.random_seed,
                "blocks": [{"idx": b.idx,
                            "vars": [_var_to_dict(v) for v in b.vars.values()],
                            "ops": [_op_to_dict(op) for op in b.ops]}
                           for b in self.blocks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Program:
        """The program ``text`` holds, checked as a built one is before it is returned:
        every field of the format present and of its type, every op known, every variable
        it uses declared, declared shapes agreeing with shape inference, the text within
        the size and nesting limits; anything else is a ``ProgramError`` naming the field
        (see program_check.py)."""
        from .program_check import check_program, parse_program_json

        program = cls._from_dict(parse_program_json(text))
        check_program(program)
        return program

    @classmethod
    def _from_dict(cls, data: dict) -> Program:
        program = cls()
        program.random_seed = data["random_seed"]
        program.blocks = []
        for raw in data["blocks"]:
            block = Block(program, raw["idx"])
            for var in raw["vars"]:
                place = _place(var.pop("place"))
                layout = _layout(var.pop("layout", None))
                variable = Variable(**{**var, "shape": tuple(var["shape"]), "place": place,
                                       "layout": layout})
                variable.block = block
                block.vars[var["name"]] = variable
            for op in raw["ops"]:
                block.ops.append(Operator(op["type"], op["inputs"], op["outputs"],
                                          _attrs_from_json(op["attrs"]), _place(op["place"])))
            program.blocks.append(block)
        return program

    # -- printing -----------------------------------------------------------------------

    def __str__(self) -> str:
        lines = []
        for block in self.blocks:
            lines.append(f"block {block.idx} {{")
            for v in block.vars.values():
                flags = "".join([" persistable" if v.persistable else "",
                                 " stop_gradient" if v.stop_gradient else ""])
                layout = "" if v.layout is None else f" layout {v.layout}"
                lines.append(f"  var {v.name} : {v.dtype}{list(v.shape)}{flags}{layout}")
            for op in block.ops:
                lines.append(f"  {op}")
            lines.append("}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz: ops as boxes, variables as ellipses, edges in data-flow order."""
        out = ["digraph program {"]
        for block in self.blocks:
            for name in block.vars:
                out.append(f'  "{name}" [shape=ellipse];')
            for i, op in enumerate(block.ops):
                node = f"op{block.idx}_{i}"
                out.append(f'  {node} [shape=box, label="{op.type}"];')
                out += [f'  "{name}" -> {node};' for name in op.input_names()]
                out += [f'  {node} -> "{name}";' for name in op.output_names()]
        out.append("}")
        return "\n".join(out)


def _var_to_dict(v: Variable) -> dict:
    d = {f.name: getattr(v, f.name) for f in fields(v)}
    d["shape"] = list(v.shape)
    d["place"] = None if v.place is None else asdict(v.place)
    d["layout"] = None if v.layout is None else v.layout.to_dict()
    return d


def _op_to_dict(op: Operator) -> dict:
    return {"type": op.type, "inputs": op.inputs, "outputs": op.outputs,
            "attrs": _attrs_to_json(op.attrs),
            "place": None if op.place is None else asdict(op.place)}


def _attrs_to_json(attrs: dict) -> dict:
    # tuples are kept apart from lists so that a round trip is lossless
    return {k: {"tuple": list(v)} if isinstance(v, tuple) else v for k, v in attrs.items()}


def _attrs_from_json(attrs: dict) -> dict:
    return {k: tuple(v["tuple"]) if isinstance(v, dict) and set(v) == {"tuple"} else v
            for k, v in attrs.items()}


def _layout(raw: dict | None):
    if raw is None:
        return None
    from .layouts.mesh import Layout
    return Layout.from_dict(raw)


def _place(raw: dict | None) -> PlaceGroup | None:
    if raw is None:
        return None
    return PlaceGroup(*(tuple(raw[k]) for k in ("roles", "nodes", "places")))


# -- default programs and unique names ---------------------------------------------------

_main = Program()
_startup = Program()
current_place: PlaceGroup | None = None   # set by placement.place_guard
_names = itertools.count()


def default_main_program() -> Program:
    return _main


def default_startup_program() -> Program:
    return _startup


@contextlib.contextmanager
def program_guard(main: Program, startup: Program | None = None) -> Iterator[None]:
    """Build into ``main`` (and ``startup``) inside the block, as Paddle's program_guard."""
    global _main, _startup
    saved = _main, _startup
    _main = main
    if startup is not None:
        _startup = startup
    try:
        yield
    finally:
        _main, _startup = saved


def unique_name(prefix: str) -> str:
    return f"{prefix}_{next(_names)}"


def reset_unique_names() -> None:
    """Start names from 0 again (two builds of one network then name alike)."""
    global _names
    _names = itertools.count()
