"""An op's sharding: which mesh dimension splits which of its dimensions.

An op is described by its *signature*: one letter per dimension of each input and output,
a letter shared where dimensions must be split alike (a matmul is ``mk, kn -> mn``; rules.py
gives every op's).  An ``OpSharding`` names, for each dimension of a device mesh, the letter
it splits (None: the op is repeated along it).  From that every tensor's layout follows:
a letter the tensor has is ``Shard`` of its dimension, a letter an output lacks was summed
over (``Partial``), anything else is ``Replicate``.

A MindSpore strategy (``((2, 1), (1, 2))``: per input, the parts of each dimension) becomes
an ``OpSharding`` as MindSpore builds its device matrix: one mesh dimension per letter split
in more than one part, in the order the letters first appear, and the ranks left over
(``ranks / product``) as one more, repeated, dimension at the end.  Meshes are 1-D or 2-D,
so a strategy may split at most two letters (one, with ranks left over).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ProgramError
from ..layouts import DeviceMesh, Layout, Partial, Replicate, Shard


def normalize_strategy(strategy, where: str) -> tuple:
    """``strategy`` as a tuple of tuples of ints >= 1, or ``ProgramError`` naming ``where``."""
    expected = "expected one tuple per input of the parts of each dimension, e.g. " \
               "((2, 1), (1, 2))"
    try:
        result = tuple(tuple(parts) for parts in strategy)
    except TypeError:
        raise ProgramError(f"{where}: {expected}, got {strategy!r}") from None
    if not result or not all(type(n) is int and n >= 1 for parts in result for n in parts):
        raise ProgramError(f"{where}: {expected}, got {strategy!r}")
    return result


@dataclass(frozen=True)
class Signature:
    """One letter string per tensor of each slot; ``resolved``: letters an output lacks
    because the kernel already reduced them (its value is whole there, not Partial)."""

    inputs: dict
    outputs: dict
    resolved: frozenset = frozenset()

    def letters(self) -> list[str]:
        """Every letter of the inputs, in the order of first appearance."""
        seen = []
        for dims_list in self.inputs.values():
            for dims in dims_list:
                seen += [letter for letter in dims if letter not in seen]
        return seen

    def form(self) -> str:
        """The strategy's expected form: ``((m, k), (k, n))``."""
        parts = [f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
                 for dims_list in self.inputs.values() for dims in dims_list]
        return f"({', '.join(parts)})"


@dataclass(frozen=True)
class OpSharding:
    """Per dimension of ``mesh``, the letter it splits or None."""

    mesh: DeviceMesh
    letters: tuple

    def layout(self, dims: str, output: bool = False, resolved=frozenset()) -> Layout:
        placements = []
        for letter in self.letters:
            if letter is not None and letter in dims:
                placements.append(Shard(dims.index(letter)))
            elif output and letter is not None and letter not in resolved:
                placements.append(Partial())
            else:
                placements.append(Replicate())
        return Layout(self.mesh, tuple(placements))

    def gradient_layout(self, dims: str) -> Layout:
        """The layout an input's gradient comes out of the op's gradient kernel in: split
        where the input is, a sum of parts (Partial) along a split letter it lacks."""
        return self.layout(dims, output=True)

    @property
    def split(self) -> bool:
        return any(letter is not None for letter in self.letters)

    def to_dict(self) -> dict:
        return {"mesh": self.mesh.to_dict(), "letters": list(self.letters)}

    @classmethod
    def from_dict(cls, data: dict) -> OpSharding:
        return cls(DeviceMesh(data["mesh"]["shape"], data["mesh"]["ranks"]),
                   tuple(data["letters"]))


def from_strategy(label: str, signature: Signature, strategy, nranks: int) -> OpSharding:
    """The sharding a MindSpore strategy asks for on ``nranks`` ranks; ``ProgramError``
    naming the op (``label``), the strategy and the expected form otherwise."""
    form = signature.form()
    strategy = normalize_strategy(strategy, f"{label}: shard")
    tensors = [dims for dims_list in signature.inputs.values() for dims in dims_list]

    def fail(why: str):
        raise ProgramError(f"{label}: strategy {strategy} {why}; expected {form} (parts of "
                           f"each dimension, a letter split alike wherever it appears), "
                           f"with a product of parts dividing the {nranks} ranks")

    if len(strategy) != len(tensors) or any(len(parts) != len(dims)
                                            for parts, dims in zip(strategy, tensors)):
        fail("does not have one entry per dimension of each input")
    parts: dict[str, int] = {}
    for dims, counts in zip(tensors, strategy):
        for letter, count in zip(dims, counts):
            if parts.setdefault(letter, count) != count:
                fail(f"splits dimension {letter!r} in {parts[letter]} and in {count} parts")
            if letter.isupper() and count != 1:
                fail(f"splits a broadcast (size-1) dimension in {count} parts")
    split = [(letter, parts[letter]) for letter in signature.letters() if parts[letter] > 1]
    product = math.prod(count for _, count in split)
    if product > nranks:
        fail(f"needs {product} ranks: a mesh larger than the communicator")
    if nranks % product:
        fail(f"does not divide the mesh: {product} parts on {nranks} ranks")
    shape = [count for _, count in split] + ([nranks // product] if nranks > product else [])
    letters = [letter for letter, _ in split] + ([None] if nranks > product else [])
    if len(shape) > 2:
        fail(f"needs a {len(shape)}-D device matrix {shape}; meshes are 1-D or 2-D")
    return OpSharding(DeviceMesh(tuple(shape) or (1,)), tuple(letters) or (None,))


def following(signature: Signature, layouts: dict, nranks: int) -> OpSharding:
    """The sharding of an op without a strategy: its first input that has a layout keeps
    its split dimensions (Partial ones are summed first); no layout: repeated on every
    rank."""
    for slot, dims_list in signature.inputs.items():
        for dims, layout in zip(dims_list, layouts.get(slot, ())):
            if layout is None:
                continue
            letters = tuple(dims[p.dim] if isinstance(p, Shard) and dims[p.dim].islower()
                            else None for p in layout.placements)
            return OpSharding(layout.mesh, letters)
    return OpSharding(DeviceMesh((nranks,)), (None,))
