"""The transfers a placed program implies, and each rank's program (``for_rank``).

Walking the ops in program order, every variable has a location: where its current value
was made (its last writer's ranks; whether that writer is replicated over a role), which
ranks hold a copy by now, or, for a sliced variable, where each row slice lives.  An op
reading a variable on ranks that hold no copy is a **crossing edge**, and one transfer
carries it (named after the variable):

- one rank to one rank: ``send``/``recv``;
- one rank (or placed copies) to several: ``bcast`` over the ranks involved;
- a role's replicas to one rank: ``reduce`` (a sum, times ``1/replicas`` under the
  gradient scale "coeff_num_device"): each replica worked on its share of the batch, as
  the trainers' gradients a pserver owns;
- a sliced variable: one transfer per slice (rows of the whole variable to the slice's
  rank, or a slice to the ranks reading the whole), then ``concat`` on every reader.

Each transfer is the one-step route that the layouts' planner (layouts/planner.py) finds
from the value where it was made to where it is read, each side a one-dimensional mesh of
its ranks: the whole value on the making rank (``Replicate``; summands on the replicas:
``Partial``) to the whole value on every reader.  The step (a ``reduce``, or an
``exchange`` to one rank or several) is the transfer's kind, and its bytes the transfer's
(``Transfer.route``, what ``ex.count_traffic`` counts the transfer ops moving).

A transfer goes right after the op that wrote the value it carries (at the start of the
step for a value from the previous step), so gradients leave while the backward pass goes
on.  Transfers keep the order of this walk, which every rank makes alike: each rank issues
its part of them in one global order, so blocking transfers cannot deadlock.  A sliced op
(an op placed on several ranks reading or writing sliced variables) runs on each rank on
that rank's slices.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ProgramError
from ..ir import Operator, Program
from ..layouts.mesh import DeviceMesh, Layout, Partial, Replicate
from ..layouts.planner import Redistribution, plan_redistribution
from .cluster import Cluster, replicated
from .place_pass import slice_rows, slices_of

GRADIENT_SCALES = ("coeff_num_device", "one")
TRANSFER_TYPES = ("send_var", "recv_var", "bcast_var", "reduce_var")


@dataclass
class Transfer:
    """One transfer of a crossing edge: ``source`` (rows ``rows`` of it, or all) read on
    ``senders``, written as ``target`` on ``receivers``."""

    kind: str                 # "send", "bcast" or "reduce"
    var: str                  # the variable of the edge
    source: str
    target: str
    senders: tuple
    receivers: tuple
    shape: tuple
    dtype: str
    rows: tuple | None = None
    scale: float | None = None
    route: Redistribution | None = None   # the planner's, for one row where a dimension is -1

    @property
    def group(self) -> tuple:
        return tuple(sorted(set(self.senders) | set(self.receivers)))

    @property
    def root(self) -> int:
        return self.receivers[0] if self.kind == "reduce" else self.senders[0]

    def __str__(self) -> str:
        rows = "" if self.rows is None else f" rows {self.rows[0]}:{self.rows[1]}"
        scale = "" if self.scale in (None, 1.0) else f" x{self.scale:g}"
        return (f"{self.kind} {self.source}{rows} {list(self.senders)} -> {self.target} "
                f"{list(self.receivers)}{scale}")

    def op_for(self, rank: int) -> Operator:
        """This transfer as ``rank`` runs it."""
        attrs = {"op_role": "transfer", "var": self.var, "group": self.group,
                 "root": self.root, "rows": self.rows, "shape": self.shape,
                 "dtype": self.dtype}
        sending = rank in self.senders
        inputs = {"X": [self.source]} if sending else {}
        outputs = {} if sending else {"Out": [self.target]}
        if not sending and self.scale is not None:
            attrs["scale"] = self.scale
        if self.kind == "send":
            peer = self.receivers[0] if sending else self.senders[0]
            return Operator("send_var" if sending else "recv_var", inputs, outputs,
                            {**attrs, "peer": peer})
        return Operator(f"{self.kind}_var", inputs, outputs, attrs)


@dataclass
class _Location:
    origin: tuple = ()           # the ranks that made the value
    partial: bool = False        # made by a role's replicas, each on its share
    have: set = field(default_factory=set)
    sliced: bool = False


@dataclass
class Edge:
    """A crossing edge: ``var`` read by op ``consumer`` where no copy was."""

    var: str
    consumer: int
    transfers: list


class PlacedProgram:
    """A placed program with its transfers: ``items`` (ops and transfers in the one global
    order, each op with its ranks), ``edges``, ``transfers``, ``groups`` (the rank sets
    of the collective transfers, each needing a sub-communicator)."""

    def __init__(self, program: Program, cluster: Cluster,
                 gradient_scale: str = "coeff_num_device") -> None:
        if gradient_scale not in GRADIENT_SCALES:
            raise ProgramError(f"gradient_scale: expected one of {', '.join(GRADIENT_SCALES)}"
                               f" under placement, got {gradient_scale!r}")
        self.program, self.cluster, self.gradient_scale = program, cluster, gradient_scale
        self.block = program.global_block()
        self.edges: list[Edge] = []
        self.items: list[tuple] = []    # ("op", Operator, ranks, sliced) | ("transfer", T)
        self._plan()
        self.transfers = [item[1] for item in self.items if item[0] == "transfer"]
        self.groups = sorted({t.group for t in self.transfers if t.kind != "send"})

    # -- planning ------------------------------------------------------------------------

    def _ranks(self, group, what: str) -> tuple:
        return self.cluster.ranks(group, what)

    def _sliced(self, op: Operator, ranks: tuple) -> bool:
        if len(ranks) < 2:
            return False
        for name in op.input_names() + op.output_names():
            pieces = slices_of(self.block, name) if name else []
            if pieces and set(ranks) == {r for p in pieces
                                         for r in self._ranks(p.place, p.name)}:
                return True
        return False

    def _initial(self, name: str) -> _Location | None:
        var = self.block.var(name)
        pieces = slices_of(self.block, name)
        if pieces and var.place is not None:
            return _Location(sliced=True)
        if var.place is None:
            return None
        ranks = self._ranks(var.place, f"variable {name!r}")
        return _Location(ranks, False, set(ranks))

    def _plan(self) -> None:
        block, ops = self.block, self.block.ops
        inserts: list[tuple] = []    # (point, sequence, item)
        locations: dict[str, _Location] = {}
        last_writer: dict[str, int] = {}
        for index, op in enumerate(ops):
            what = f"op #{index} {op.type}"
            if op.place is None:
                raise ProgramError(f"{what}: no place (place the program with ex.place)")
            ranks = self._ranks(op.place, what)
            sliced = self._sliced(op, ranks)
            for name in dict.fromkeys(n for n in op.input_names() if n):
                location = locations.get(name)
                if location is None:
                    location = self._initial(name)
                    if location is None:
                        self._check_fed(name, op, ranks)
                        continue
                    locations[name] = location
                point = last_writer.get(name, -1) + 1
                made = []
                pieces = slices_of(block, name) if sliced else []
                if pieces:
                    if not location.sliced:
                        made = self._to_slices(name, location, pieces, what)
                elif location.sliced:
                    need = sorted(set(ranks) - location.have)
                    if need:
                        made = self._from_slices(name, need, inserts, point)
                        location.have.update(need)
                else:
                    need = tuple(sorted(set(ranks) - location.have))
                    if need:
                        made = [self._transfer(name, name, name, location, need, None, what)]
                        location.have.update(need)
                if made:
                    self.edges.append(Edge(name, index, made))
                    for transfer in made:
                        inserts.append((point, len(inserts), ("transfer", transfer)))
                    if location.sliced and not pieces:
                        concat = Operator("concat", {"X": [p.name for p in slices_of(
                            block, name)]}, {"Out": [name]}, {"axis": 0,
                                                             "op_role": "transfer"})
                        inserts.append((point, len(inserts), ("op", concat, tuple(need),
                                                              False)))
            inserts.append((index + 1, -1, ("op", op, ranks, sliced)))  # before its outputs' transfers
            for name in op.output_names():
                if not name:
                    continue
                last_writer[name] = index
                if sliced and slices_of(block, name):
                    locations[name] = _Location(sliced=True)
                else:
                    locations[name] = _Location(ranks, replicated(op.place) and len(ranks) > 1,
                                                set(ranks))
        # ops sort at their own index + 1 ahead of the transfers placed after them
        self.items = [item for _, _, item in sorted(inserts, key=lambda e: (e[0], e[1]))]

    def _check_fed(self, name: str, op: Operator, ranks: tuple) -> None:
        var = self.block.var(name)
        if not (var.persistable or var.stop_gradient):
            raise ProgramError(f"variable {name!r}: consumed by op {op.type} on ranks "
                               f"{list(ranks)}, but no op producing it is placed before it "
                               "(and it is neither fed data nor persistable)")

    def _transfer(self, var: str, source: str, target: str, location: _Location,
                  receivers: tuple, rows, what: str) -> Transfer:
        decl = self.block.var(target)
        shape, dtype = tuple(decl.shape), decl.dtype
        if location.partial and len(location.origin) > 1:
            if len(receivers) != 1:
                raise ProgramError(f"{what}: reads {var!r}, made by the replicas on ranks "
                                   f"{list(location.origin)}, on ranks {list(receivers)}: a "
                                   "replicated value goes to one owner (a reduce); place "
                                   "one op to own it")
            if -1 in shape:
                raise ProgramError(f"{what}: {var!r} has a batch dimension {list(shape)}; "
                                   "replicas can only sum values of one shape")
            scale = 1.0 / len(location.origin) if self.gradient_scale == "coeff_num_device" \
                else 1.0
            route = _route(location.origin, True, receivers, shape, dtype)
            return Transfer(_kind(route, what), var, source, target, location.origin,
                            receivers, shape, dtype, rows, scale, route)
        senders = (location.origin[0],)
        route = _route(senders, False, receivers, shape, dtype)
        return Transfer(_kind(route, what), var, source, target, senders, receivers, shape,
                        dtype, rows, route=route)

    def _to_slices(self, name: str, location: _Location, pieces, what: str) -> list:
        made = []
        for piece, rows in zip(pieces, slice_rows(self.block, name)):
            dest = self._ranks(piece.place, piece.name)
            if set(dest) & location.have:
                raise ProgramError(f"{what}: reads slice {piece.name!r} on rank {list(dest)}, "
                                   f"which holds all of {name!r}: slice it by hand")
            made.append(self._transfer(name, name, piece.name, location, dest, rows, what))
        return made

    def _from_slices(self, name: str, need: list, inserts: list, point: int) -> list:
        made = []
        for piece in slices_of(self.block, name):
            owner = self._ranks(piece.place, piece.name)
            receivers = tuple(r for r in need if r not in owner)
            if receivers:
                made.append(self._transfer(name, piece.name, piece.name,
                                           _Location(owner, False, set(owner)),
                                           receivers, None, f"variable {name!r}"))
        return made

    # -- per rank ------------------------------------------------------------------------

    def ranks_of(self, item) -> tuple:
        return item[2] if item[0] == "op" else item[1].group

    def for_rank(self, rank: int) -> Program:
        """The program ``rank`` runs: its ops (a sliced op on its slices) and its part of
        every transfer, in the global order; every variable stays declared."""
        if not 0 <= rank < self.cluster.size:
            raise ProgramError(f"rank: expected 0 <= rank < {self.cluster.size}, got {rank}")
        result = self.program.clone()
        block = result.global_block()
        ops = []
        for item in self.items:
            if rank not in self.ranks_of(item):
                continue
            if item[0] == "transfer":
                op = item[1].op_for(rank)
            else:
                _, source, _, sliced = item
                op = Operator(source.type, {k: list(v) for k, v in source.inputs.items()},
                              {k: list(v) for k, v in source.outputs.items()},
                              dict(source.attrs), source.place)
                if sliced:
                    self._on_slices(op, rank)
            ops.append(op)
        block.ops = ops
        result.rank = rank
        result.cluster = None     # what a rank runs, not a program to place and split again
        return result

    def _on_slices(self, op: Operator, rank: int) -> None:
        def mine(name: str) -> str:
            for piece in slices_of(self.block, name) if name else []:
                if rank in self._ranks(piece.place, piece.name):
                    return piece.name
            return name
        op.inputs = {k: [mine(n) for n in v] for k, v in op.inputs.items()}
        op.outputs = {k: [mine(n) for n in v] for k, v in op.outputs.items()}

    def listing(self, rank: int) -> str:
        """What ``rank`` runs, one line per op, transfers as ``kind var senders ->
        receivers`` (the per-role programs of the design's example)."""
        def slots(table):
            return ", ".join(f"{slot}={','.join(names)}" for slot, names in table.items())
        lines = [f"rank {rank} ({self.cluster.role_of(rank)}, "
                 f"{self.cluster.endpoints[rank]}):"]
        for op in self.for_rank(rank).global_block().ops:
            if op.type in TRANSFER_TYPES:
                item = next(i[1] for i in self.items if i[0] == "transfer"
                            and i[1].var == op.attrs["var"] and i[1].group == tuple(
                                op.attrs["group"]) and (i[1].source in op.input_names() or
                                                        i[1].target in op.output_names()))
                lines.append(f"  {'send' if op.inputs else 'recv'}: {item}")
            else:
                outs = ",".join(n for n in op.output_names() if n)
                lines.append(f"  {outs} = {op.type}({slots(op.inputs)})")
        return "\n".join(lines)

    def describe(self) -> str:
        """The crossing edges and their transfers, in order."""
        lines = []
        for edge in self.edges:
            consumer = self.block.ops[edge.consumer]
            lines.append(f"{edge.var} -> op #{edge.consumer} {consumer.type}: " +
                         "; ".join(str(t) for t in edge.transfers))
        return "\n".join(lines)


def _route(senders: tuple, summands: bool, receivers: tuple, shape: tuple,
           dtype: str) -> Redistribution:
    """The planner's route from the value on ``senders`` (the whole value on each, or
    summands) to the whole value on every one of ``receivers``; a dimension of -1 (the
    batch) planned as one row."""
    held = Layout(DeviceMesh((len(senders),), senders),
                  (Partial() if summands else Replicate(),))
    wanted = Layout(DeviceMesh((len(receivers),), tuple(sorted(receivers))), (Replicate(),))
    return plan_redistribution(held, wanted, tuple(1 if d == -1 else d for d in shape),
                               dtype)


def _kind(route: Redistribution, what: str) -> str:
    """The transfer kind of a one-step route: its step's (``reduce``, ``bcast``), an
    ``exchange`` (from one rank) being a ``send``.  An empty value's exchange has no pieces
    to tell a bcast by: its kind is read from its readers (one: ``send``)."""
    if len(route.steps) != 1 or route.steps[0].kind not in ("reduce", "exchange", "bcast"):
        raise ProgramError(f"{what}: no one-step transfer for {route}")
    kind = route.steps[0].kind
    if kind == "exchange":
        return "send" if route.dst.mesh.size == 1 else "bcast"
    return kind


def plan_transfers(program: Program, cluster: Cluster | None = None,
                   gradient_scale: str = "coeff_num_device") -> PlacedProgram:
    """The transfers of ``program`` (placed by ``ex.place``) over ``cluster`` (default:
    the one it was placed for)."""
    cluster = cluster if cluster is not None else getattr(program, "cluster", None)
    if cluster is None:
        raise ProgramError("program: not placed; call ex.place(program, strategy, cluster) "
                           "first")
    return PlacedProgram(program, cluster, gradient_scale)

