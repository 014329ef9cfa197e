"""``place(program, strategy, cluster)``: the placement pass.  It only assigns PlaceGroups to
ops and variables (and declares the row slices of a sliced variable); it inserts no op: the
transfers follow from the places at run time (transfers.py).

Strategies are policies over the same attribute:

- ``HandPlacement()`` (the default): the user set ``op.place`` / ``var.place`` (e.g. with
  ``place_guard``); the pass completes what follows from it.  A gradient op runs where its
  forward op runs; the loss gradient's fill where the loss is made; a gradient sum where
  the variable it differentiates is made; an optimizer op where its parameter lives; any
  other op left where its consumers (else its producers) all agree.
- ``ParameterServerStrategy(num_pservers=None)``: Paddle's DistributeTranspiler as a
  placement.  Optimizer ops, parameters, their optimizer state and every op the optimizer
  ops depend on besides the gradients (learning-rate decay) go to pserver ranks, the
  parameters balanced over the pservers by bytes; a parameter above ``slice_bytes`` is
  sliced row-wise over the pservers (``w.block0``, ``w.block1``, ... are variables placed
  one per pserver, with their own shapes; ``numpy.array_split`` rows); forward and backward
  ops stay replicated on the trainer role.

Then, for every strategy: a variable written by the program lives where its last writer
runs (so a parameter is where it is updated, step after step); a variable nothing writes
keeps its own place (None: wherever it is read, as fed data and the startup program's
values are on every rank).  Every place must resolve in the cluster (``ProgramError``).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from ..errors import ProgramError
from ..ir import Block, Operator, PlaceGroup, Program, Variable
from ..layouts.mesh import DeviceMesh, Layout, Shard
from .cluster import Cluster, as_place_group, format_place_group, replicated

SLICE = ".block"


def slice_name(name: str, index: int) -> str:
    return f"{name}{SLICE}{index}"


def slices_of(block: Block, name: str) -> list[Variable]:
    """The declared row slices of ``name`` (``name.block0``, ...), in order; [] if none."""
    found = []
    while slice_name(name, len(found)) in block.vars:
        found.append(block.vars[slice_name(name, len(found))])
    return found


def slice_rows(block: Block, name: str) -> list[tuple[int, int]]:
    """``[start, stop)`` of each slice of ``name``."""
    stops = np.cumsum([v.shape[0] for v in slices_of(block, name)])
    return [(int(a), int(b)) for a, b in zip(np.concatenate([[0], stops[:-1]]), stops)]


def slice_layout(parts: int) -> Layout:
    """What a variable sliced row-wise in ``parts`` is: ``[Shard(0)]`` over a 1-D mesh of
    its slices (layouts/), whose boxes give each slice's rows."""
    return Layout(DeviceMesh(parts), (Shard(0),))


def declare_slices(block: Block, name: str, groups: list[PlaceGroup]) -> None:
    """Declare ``name`` sliced row-wise over ``groups`` (one slice per group)."""
    var = block.var(name)
    layout = slice_layout(len(groups))
    for index in range(len(groups)):
        rows = layout.local_shape(index, var.shape)[0]
        piece = block.create_var(slice_name(name, index), (rows,) + tuple(var.shape[1:]),
                                 var.dtype, persistable=var.persistable)
        piece.place = groups[index]


class PlacementStrategy:
    """A policy that assigns PlaceGroups; ``assign`` sets what it decides."""

    def assign(self, program: Program, cluster: Cluster) -> None:
        raise NotImplementedError


class HandPlacement(PlacementStrategy):
    """Keep what the user placed; the pass completes the rest (see the module docstring)."""

    def assign(self, program: Program, cluster: Cluster) -> None:
        if not any(op.place for op in program.global_block().ops):
            raise ProgramError("place: no op of the program has a place; set op.place, build "
                               "inside ex.place_guard(...), or pass a strategy such as "
                               "ParameterServerStrategy()")


class ParameterServerStrategy(PlacementStrategy):
    """Optimizer side on the pservers, forward and backward replicated on the trainers."""

    def __init__(self, num_pservers: int | None = None, slice_bytes: int = 1 << 20,
                 trainer_role: str = "trainer", pserver_role: str = "pserver") -> None:
        """``num_pservers``: how many of the pserver role's ranks hold parameters (all by
        default); ``slice_bytes``: a parameter larger than this is sliced over them."""
        if num_pservers is not None and num_pservers < 1:
            raise ProgramError(f"num_pservers: expected at least 1, got {num_pservers}")
        self.num_pservers, self.slice_bytes = num_pservers, slice_bytes
        self.trainer_role, self.pserver_role = trainer_role, pserver_role

    def assign(self, program: Program, cluster: Cluster) -> None:
        block = program.global_block()
        for role in (self.trainer_role, self.pserver_role):
            if role not in cluster.roles:
                raise ProgramError(f"ParameterServerStrategy: role {role!r} has no ranks in "
                                   f"the cluster ({cluster.describe()}); a parameter-server "
                                   f"job needs both {self.trainer_role} and "
                                   f"{self.pserver_role} ranks")
        pservers = list(cluster.roles[self.pserver_role])
        if self.num_pservers is not None:
            if self.num_pservers > len(pservers):
                raise ProgramError(f"num_pservers: expected at most {len(pservers)} (the "
                                   f"cluster's {self.pserver_role} ranks), got "
                                   f"{self.num_pservers}")
            pservers = pservers[:self.num_pservers]
        updates = [op for op in block.ops if op.attrs.get("op_role") == "optimize"]
        if not updates:
            raise ProgramError("ParameterServerStrategy: the program has no optimizer op "
                               "(call an optimizer's minimize first)")
        on = {rank: cluster.group(self.pserver_role, rank) for rank in pservers}
        everywhere = cluster.group(self.pserver_role) if len(pservers) == len(
            cluster.roles[self.pserver_role]) else PlaceGroup(
            (self.pserver_role,), tuple(cluster.endpoints[r] for r in pservers), ("cpu:0",))
        homes = self._homes(block, [op.inputs["Param"][0] for op in updates], pservers)
        for op in updates:
            param = block.var(op.inputs["Param"][0])
            home = homes[param.name]
            if home is None:    # sliced over every pserver used
                op.place = everywhere
                for name in dict.fromkeys(op.input_names() + op.output_names()):
                    var = block.var(name)
                    if var.shape == param.shape:
                        declare_slices(block, name, [on[r] for r in pservers])
                    if var.name not in op.inputs.get("Grad", ()):
                        var.place = everywhere
            else:
                op.place = on[home]
                for slot, names in op.inputs.items():
                    if slot not in ("Grad", "LearningRate"):
                        for name in names:
                            block.var(name).place = on[home]
        for op in _ops_feeding(block.ops, updates):
            op.place = everywhere
        trainers = cluster.group(self.trainer_role)
        for op in block.ops:
            if op.place is None:
                op.place = trainers

    def _homes(self, block: Block, params: list[str], pservers: list[int]) -> dict:
        """Each parameter's pserver, by bytes, largest first to the least loaded (ties to
        the lower rank); None for a parameter to slice over all of them."""
        load = dict.fromkeys(pservers, 0)
        homes = {}
        for name in sorted(dict.fromkeys(params), key=lambda p: (-_nbytes(block.var(p)), p)):
            var, nbytes = block.var(name), _nbytes(block.var(name))
            if nbytes > self.slice_bytes and len(pservers) > 1 and var.shape and \
                    var.shape[0] >= len(pservers):
                homes[name] = None
                layout = slice_layout(len(pservers))
                for index, rank in enumerate(pservers):
                    rows = layout.local_shape(index, var.shape)[0]
                    load[rank] += nbytes * rows // var.shape[0]
                continue
            rank = min(pservers, key=lambda r: (load[r], r))
            homes[name] = rank
            load[rank] += nbytes
        return homes


def _ops_feeding(ops: list[Operator], updates: list[Operator]) -> list[Operator]:
    """Ops whose outputs the optimizer ops read, transitively, besides the gradients'
    producers (learning-rate decay and its inputs)."""
    wanted = {name for op in updates for slot, names in op.inputs.items()
              if slot != "Grad" for name in names}
    update_ids = {id(op) for op in updates}
    chosen = []
    for op in reversed(ops):
        if id(op) in update_ids or op.attrs.get("op_role") in ("backward", "loss_grad"):
            continue
        if wanted.intersection(op.output_names()):
            chosen.append(op)
            wanted.update(op.input_names())
    return chosen


def _nbytes(var: Variable) -> int:
    return int(np.prod([max(d, 1) for d in var.shape])) * np.dtype(var.dtype).itemsize


# -- the pass ----------------------------------------------------------------------------

def place(program: Program, strategy: PlacementStrategy | None = None,
          cluster: Cluster | None = None) -> Program:
    """Assign PlaceGroups to ``program``'s ops and variables (in place; returns it) by
    ``strategy`` (default ``HandPlacement()``) over ``cluster`` (default: the job's, from
    ``AL_ROLES``); insert no op.  The program remembers the cluster for its executors."""
    from .runtime import default_cluster

    cluster = cluster if cluster is not None else default_cluster()
    strategy = strategy if strategy is not None else HandPlacement()
    block = program.global_block()
    for holder in list(block.ops) + list(block.vars.values()):
        holder.place = as_place_group(holder.place)
    strategy.assign(program, cluster)
    _complete_ops(block)
    _complete_vars(block)
    for op in block.ops:
        if not cluster.ranks(op.place, f"op {op.type} ({_outputs(op)})"):
            raise ProgramError(f"op {op.type}: its place {format_place_group(op.place)} "
                               f"resolves to no rank")
    for var in block.vars.values():
        if var.place is not None:
            cluster.ranks(var.place, f"variable {var.name!r}")
    program.cluster = cluster
    program.__dict__.pop("_placed_run", None)    # the sequential executor's, of old places
    return program


def _outputs(op: Operator) -> str:
    return ", ".join(n for n in op.output_names() if n) or "no outputs"


def _complete_ops(block: Block) -> None:
    """Places that follow from the user's (see ``HandPlacement``)."""
    ops = block.ops
    producer: dict[str, Operator] = {}
    forward_of: dict[tuple, Operator] = {}
    for op in ops:
        if not op.type.endswith("_grad"):
            forward_of[tuple(op.output_names())] = op
    for op in ops:
        if op.place is None:
            op.place = _rule(block, op, producer, forward_of)
        for name in op.output_names():
            producer.setdefault(name, op)
    for _ in range(len(ops)):   # the rest from consumers, else producers, to a fixed point
        changed = False
        for index, op in enumerate(ops):
            if op.place is not None:
                continue
            outs = set(op.output_names())
            consumers = {o.place for o in ops[index + 1:]
                         if outs.intersection(o.input_names()) and o.place is not None}
            producers = {producer[n].place for n in op.input_names()
                         if n in producer and producer[n].place is not None}
            for candidates in (consumers, producers):
                if len(candidates) == 1:
                    op.place = candidates.pop()
                    changed = True
                    break
        if not changed:
            break
    for op in ops:
        if op.place is None:
            raise ProgramError(f"op {op.type} ({_outputs(op)}): no place, and none follows "
                               "from its neighbours; set op.place or build it inside "
                               "ex.place_guard(...)")


def _rule(block: Block, op: Operator, producer: dict, forward_of: dict) -> PlaceGroup | None:
    role = op.attrs.get("op_role")
    if op.type.endswith("_grad"):
        forward = forward_of.get(tuple(n for slot, names in op.inputs.items()
                                       if slot.endswith("@OUT") for n in names))
        return None if forward is None else forward.place
    if role == "loss_grad":
        made = producer.get(op.output_names()[0][:-len("@GRAD")])
        return None if made is None else made.place
    if op.type == "sum" and op.output_names()[0].endswith("@GRAD"):
        made = producer.get(op.output_names()[0][:-len("@GRAD")])
        source = made.place if made is not None else \
            block.vars[op.output_names()[0][:-len("@GRAD")]].place
        return source
    if role == "optimize" and "Param" in op.inputs:
        param = block.var(op.inputs["Param"][0])
        return param.place if param.place is not None else \
            (producer[param.name].place if param.name in producer else None)
    return None


def _complete_vars(block: Block) -> None:
    """A written variable lives where its last writer runs (a sliced one keeps its
    places: its slices say where its rows are)."""
    for op in block.ops:
        for name in op.output_names():
            var = block.vars.get(name)
            if var is not None and not (slices_of(block, name) and var.place is not None):
                var.place = op.place


# -- builders' scope ---------------------------------------------------------------------

@contextlib.contextmanager
def place_guard(group) -> Iterator[PlaceGroup]:
    """Ops appended and variables created inside the block get ``group`` (a PlaceGroup or
    its string form) as their place, unless they have one."""
    from .. import ir

    group = as_place_group(group)
    saved = ir.current_place
    ir.current_place = group
    try:
        yield group
    finally:
        ir.current_place = saved


# -- explanation -------------------------------------------------------------------------

def explain_placement(program: Program, cluster: Cluster | None = None) -> str:
    """Per op and variable: replicated (a role, on each of its ranks) or placed (named
    ranks), and on which ranks; sliced variables with each slice's rank."""
    cluster = cluster if cluster is not None else getattr(program, "cluster", None)
    if cluster is None:
        raise ProgramError("explain_placement: expected a cluster (or a program placed "
                           "with ex.place), got none")
    block = program.global_block()

    def where(group: PlaceGroup | None, what: str) -> str:
        if group is None:
            return "unplaced (wherever it is read)"
        ranks = list(cluster.ranks(group, what))
        how = f"replicated over {'/'.join(group.roles)}" if replicated(group) else \
            "placed" if len(ranks) == 1 else "placed on each of"
        return f"{how} on ranks {ranks}  [{format_place_group(group)}]"

    lines = [f"cluster: {cluster.describe()}", "ops:"]
    for index, op in enumerate(block.ops):
        lines.append(f"  #{index} {op.type} -> {_outputs(op)}: {where(op.place, op.type)}")
    lines.append("variables:")
    for var in block.vars.values():
        if SLICE in var.name and var.name.rsplit(SLICE, 1)[0] in block.vars:
            continue
        pieces = slices_of(block, var.name)
        text = where(var.place, var.name)
        if pieces:
            text = "sliced row-wise: " + ", ".join(
                f"rows {a}:{b} on rank {list(cluster.ranks(p.place))}"
                for p, (a, b) in zip(pieces, slice_rows(block, var.name)))
        lines.append(f"  {var.name}: {text}")
    return "\n".join(lines)
