"""The SSA graph a program runs as (Paddle's details/ssa_graph): every write of a variable
makes a new ``VarHandle`` version; an ``OpHandle`` reads the latest version of each input.

Dummy variables carry the orderings data alone does not: a write waits for every reader
of the previous version (write after read) and for the previous writer (write after write),
communication ops run one after the other in program order (Paddle's all_reduce_deps_pass:
every rank then issues its collectives in one order), and every op without consumers gets
one as its output, so each op has at least one output.
Built once per program and reused: the dependency counts are copied per run.  A run that
fetches variables adds one fetch op per variable (``with_fetches``, Paddle's
FetchOpHandle), built once per fetch list.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ProgramError
from .ir import Operator, Program
from .ops import registry

COMPUTE, COMMUNICATION, FETCH = "compute", "communication", "fetch"


@dataclass(eq=False)
class VarHandle:
    name: str
    version: int
    place: str
    generated_op: OpHandle | None = None
    pending_ops: list = field(default_factory=list)
    dummy: bool = False

    def __repr__(self) -> str:
        return f"{self.name}#{self.version}"


@dataclass(eq=False)
class OpHandle:
    """One op of the graph; ``kind`` (compute, communication or fetch) is also the name of
    the stream it runs on, unless ``stream`` says otherwise."""

    kind: str
    op: Operator
    place: str
    index: int
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    stream: str = "compute"

    def __repr__(self) -> str:
        return f"{self.op.type}@{self.place}#{self.index}"


class SSAGraph:
    """Op handles in program order, their successors and dependency counts."""

    def __init__(self, ops: list[OpHandle], versions: dict[str, list[VarHandle]]) -> None:
        self.ops, self.versions = ops, versions
        # what must be fed or already in the scope: read before anything writes it
        self.external_inputs = sorted(name for name, vs in versions.items()
                                      if vs[0].generated_op is None)
        successors: list[set[int]] = [set() for _ in ops]
        counts = [0] * len(ops)
        for handle in ops:
            preds = {v.generated_op.index for v in handle.inputs if v.generated_op is not None}
            counts[handle.index] = len(preds)
            for pred in preds:
                successors[pred].add(handle.index)
        self.successors = [sorted(s) for s in successors]
        self.dependency_counts = counts
        self.validate()

    def validate(self) -> None:
        """Acyclic, one writer per version; raises ``ProgramError``."""
        for name, versions in self.versions.items():
            writers = [v.generated_op for v in versions]
            if len(versions) != len({id(v) for v in versions}) or any(
                    a is b and a is not None for a, b in zip(writers, writers[1:])):
                raise ProgramError(f"variable {name!r}: two writers of one version")
        counts, ready, seen = list(self.dependency_counts), \
            [i for i, c in enumerate(self.dependency_counts) if c == 0], 0
        while ready:
            index = ready.pop()
            seen += 1
            for succ in self.successors[index]:
                counts[succ] -= 1
                if counts[succ] == 0:
                    ready.append(succ)
        if seen != len(self.ops):
            stuck = [repr(self.ops[i]) for i, c in enumerate(counts) if c > 0]
            raise ProgramError(f"graph: a cycle through {', '.join(stuck[:5])}")

    def with_fetches(self, names: list[str]) -> SSAGraph:
        """This graph plus one ``fetch`` op per name, reading the variable's last version
        (so it runs after the last write) on the fetch stream; column ``i`` of the result is
        ``names[i]``.  This graph's handles are shared, not changed: a fetch op is in no
        variable's ``pending_ops``."""
        place = self.ops[0].place if self.ops else "cpu"
        handles = list(self.ops)
        for column, name in enumerate(names):
            versions = self.versions.get(name)
            var = versions[-1] if versions else VarHandle(name, 0, place)
            op = Operator("fetch", {"X": [name]}, {}, {"column": column})
            handle = OpHandle(FETCH, op, place, len(handles), [var], stream=FETCH)
            handle.outputs.append(VarHandle(f"fetch@{column}", 0, place, handle, dummy=True))
            handles.append(handle)
        return SSAGraph(handles, self.versions)

    def to_dot(self) -> str:
        lines = ["digraph ssa {"]
        for handle in self.ops:
            lines.append(f'  op{handle.index} [shape=box, label="{handle!r}"];')
            for var in handle.inputs:
                lines.append(f'  "{var!r}" -> op{handle.index};')
            for var in handle.outputs:
                style = ", style=dashed" if var.dummy else ""
                lines.append(f'  "{var!r}" [shape=ellipse{style}];')
                lines.append(f'  op{handle.index} -> "{var!r}";')
        lines.append("}")
        return "\n".join(lines)


def build_graph(program: Program, place: str = "cpu") -> SSAGraph:
    """Replay the program's ops: readers bind to the latest version, writers make a new
    one (``ProgramError`` for an unknown op type)."""
    latest: dict[str, VarHandle] = {}
    versions: dict[str, list[VarHandle]] = {}
    readers: dict[int, list[OpHandle]] = {}   # id(version) -> its readers
    handles: list[OpHandle] = []
    dummies = 0

    def dummy_edge(before: OpHandle, after: OpHandle) -> None:
        nonlocal dummies
        var = VarHandle(f"dummy@{dummies}", 0, place, before, [after], dummy=True)
        dummies += 1
        before.outputs.append(var)
        after.inputs.append(var)

    last_communication: OpHandle | None = None
    for op in program.global_block().ops:
        kind = registry.get(op.type)
        handle = OpHandle(COMMUNICATION if kind.communicates else COMPUTE, op, place,
                          len(handles))
        handle.stream = handle.kind
        if kind.communicates:
            # one chain in program order: every rank issues its collectives alike
            if last_communication is not None:
                dummy_edge(last_communication, handle)
            last_communication = handle
        for name in op.input_names():
            if not name:
                continue
            var = latest.get(name)
            if var is None:   # fed, or in the scope before the run
                var = latest[name] = VarHandle(name, 0, place)
                versions.setdefault(name, []).append(var)
            if handle not in var.pending_ops:
                var.pending_ops.append(handle)
                handle.inputs.append(var)
                readers.setdefault(id(var), []).append(handle)
        for name in op.output_names():
            if not name:
                continue
            previous = latest.get(name)
            var = VarHandle(name, 0 if previous is None else previous.version + 1, place,
                            handle)
            if previous is not None:
                for reader in readers.get(id(previous), []):
                    if reader is not handle:
                        dummy_edge(reader, handle)
                if previous.generated_op is not None and previous.generated_op is not handle:
                    dummy_edge(previous.generated_op, handle)
            handle.outputs.append(var)
            latest[name] = var
            versions.setdefault(name, []).append(var)
        handles.append(handle)
    for handle in handles:
        if not any(v.pending_ops for v in handle.outputs):
            handle.outputs.append(VarHandle(f"dummy@{dummies}", 0, place, handle, dummy=True))
            dummies += 1
    return SSAGraph(handles, versions)
