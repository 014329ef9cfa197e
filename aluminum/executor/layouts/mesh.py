"""Device meshes and tensor layouts: DTensor's ``DeviceMesh`` + one placement per mesh
dimension, which is MindSpore's device matrix + tensor map.

A ``DeviceMesh(shape, ranks)`` arranges ranks of a communicator (all of them or a subset)
row-major in a 1-D or 2-D grid.  A ``Layout`` gives each mesh dimension a placement:

- ``Shard(d)``: tensor dimension ``d`` is split over the mesh dimension like
  ``numpy.array_split`` (the first ``n % p`` parts one longer);
- ``Replicate()``: every rank along the mesh dimension holds the same values;
- ``Partial()``: the ranks along it hold summands; the tensor is their sum.

Several mesh dimensions may shard one tensor dimension: the lower mesh dimension splits
first, the next one splits each part again (DTensor's order).  So every rank holds one box
of the tensor (``Layout.box``), a product of index ranges; with Partial dimensions a rank's
box holds the summand named by its coordinates along them (``Layout.summand``).

A layout is a variable attribute in the program IR (``Variable.layout``) and a
redistribution op attribute; both go through JSON as ``Layout.to_dict``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ProgramError


@dataclass(frozen=True)
class Shard:
    """Split tensor dimension ``dim`` over the mesh dimension (numpy.array_split)."""

    dim: int

    def __post_init__(self) -> None:
        if type(self.dim) is not int or self.dim < 0:
            raise ProgramError(f"Shard.dim: expected a tensor dimension >= 0, got {self.dim!r}")

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True)
class Replicate:
    """Every rank along the mesh dimension holds the whole (box of the) tensor."""

    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True)
class Partial:
    """The ranks along the mesh dimension hold summands of the tensor (only ``sum``)."""

    reduce_op: str = "sum"

    def __post_init__(self) -> None:
        if self.reduce_op != "sum":
            raise ProgramError(f"Partial.reduce_op: expected 'sum', got {self.reduce_op!r}")

    def __str__(self) -> str:
        return "P"


PLACEMENTS = (Shard, Replicate, Partial)


def split_bounds(size: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each part of ``size`` split like ``numpy.array_split``."""
    base, extra = divmod(size, parts)
    bounds, start = [], 0
    for part in range(parts):
        stop = start + base + (1 if part < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class DeviceMesh:
    """``shape`` (1-D or 2-D) over ``ranks`` of a communicator, row-major; ``ranks``
    defaults to ``0 .. prod(shape)-1``.  ``comm``, when given, is the communicator the
    ranks belong to (checked: the mesh fits in it) and what redistributions run on when no
    executor gives one; it is not part of the mesh's identity nor of its JSON."""

    def __init__(self, shape, ranks=None, comm=None) -> None:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if not 1 <= len(shape) <= 2 or not all(type(d) is int and d >= 1 for d in shape):
            raise ProgramError(f"DeviceMesh shape: expected 1 or 2 positive integers, got "
                               f"{list(shape)}")
        size = math.prod(shape)
        if ranks is None:
            ranks = range(size)
        ranks = tuple(int(r) for r in _flatten(ranks))
        if len(ranks) != size:
            raise ProgramError(f"DeviceMesh ranks: expected {size} ranks for shape "
                               f"{list(shape)}, got {len(ranks)}: {list(ranks)}")
        if len(set(ranks)) != size or min(ranks) < 0:
            raise ProgramError(f"DeviceMesh ranks: expected distinct ranks >= 0, got "
                               f"{list(ranks)}")
        if comm is not None and max(ranks) >= comm.size:
            raise ProgramError(f"DeviceMesh ranks: expected ranks of the communicator "
                               f"(0 .. {comm.size - 1}), got {list(ranks)}: a mesh larger "
                               "than the communicator")
        self.shape, self.ranks, self.comm = shape, ranks, comm
        if comm is not None:
            known_comm(self, comm)
        self._coords = {rank: _unravel(i, shape) for i, rank in enumerate(ranks)}

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def coordinate(self, rank: int) -> tuple | None:
        """The mesh coordinate of communicator rank ``rank``; None if not in the mesh."""
        return self._coords.get(rank)

    def rank_at(self, coord) -> int:
        index = 0
        for c, d in zip(coord, self.shape):
            index = index * d + c
        return self.ranks[index]

    def line(self, rank: int, dim: int) -> tuple:
        """The ranks along mesh dimension ``dim`` through ``rank`` (a group, in order)."""
        coord = list(self.coordinate(rank))
        members = []
        for c in range(self.shape[dim]):
            coord[dim] = c
            members.append(self.rank_at(coord))
        return tuple(members)

    def __eq__(self, other) -> bool:
        return isinstance(other, DeviceMesh) and (self.shape, self.ranks) == \
            (other.shape, other.ranks)

    def __hash__(self) -> int:
        return hash((self.shape, self.ranks))

    def __repr__(self) -> str:
        return f"DeviceMesh({list(self.shape)}, ranks={list(self.ranks)})"

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "ranks": list(self.ranks)}


@dataclass(frozen=True)
class Layout:
    """One placement per dimension of ``mesh`` (see the module docstring)."""

    mesh: DeviceMesh
    placements: tuple

    def __post_init__(self) -> None:
        if not isinstance(self.mesh, DeviceMesh):
            raise ProgramError(f"Layout mesh: expected a DeviceMesh, got "
                               f"{type(self.mesh).__name__}")
        placements = tuple(self.placements)
        object.__setattr__(self, "placements", placements)
        if len(placements) != self.mesh.ndim or not all(
                isinstance(p, PLACEMENTS) for p in placements):
            raise ProgramError(f"Layout placements: expected {self.mesh.ndim} of Shard(d), "
                               f"Replicate(), Partial() (one per mesh dimension), got "
                               f"{[str(p) for p in placements]}")

    def check(self, shape, what: str = "layout") -> None:
        """``ProgramError`` unless every Shard names a dimension of a tensor of ``shape``."""
        for placement in self.placements:
            if isinstance(placement, Shard) and placement.dim >= len(shape):
                raise ProgramError(f"{what}: {self} shards dimension {placement.dim}, but the "
                                   f"tensor has shape {list(shape)}")

    @property
    def partial_dims(self) -> tuple:
        return tuple(i for i, p in enumerate(self.placements) if isinstance(p, Partial))

    def box(self, rank: int, shape) -> tuple | None:
        """The index range ``(start, stop)`` per tensor dimension that ``rank`` holds;
        None off the mesh."""
        coord = self.mesh.coordinate(rank)
        if coord is None:
            return None
        box = [(0, size) for size in shape]
        for mesh_dim, placement in enumerate(self.placements):
            if isinstance(placement, Shard):
                start, stop = box[placement.dim]
                a, b = split_bounds(stop - start, self.mesh.shape[mesh_dim])[coord[mesh_dim]]
                box[placement.dim] = (start + a, start + b)
        return tuple(box)

    def summand(self, rank: int) -> tuple:
        """Which summand ``rank`` holds: its coordinates along the Partial dimensions."""
        coord = self.mesh.coordinate(rank)
        return tuple(coord[i] for i in self.partial_dims)

    def local_shape(self, rank: int, shape) -> tuple | None:
        box = self.box(rank, shape)
        return None if box is None else tuple(b - a for a, b in box)

    def with_placement(self, mesh_dim: int, placement) -> Layout:
        placements = list(self.placements)
        placements[mesh_dim] = placement
        return Layout(self.mesh, tuple(placements))

    def for_gradient(self) -> Layout:
        """The layout a gradient takes by default (DTensor's rule): Partial becomes
        Replicate, as every summand's gradient is the whole tensor's."""
        return Layout(self.mesh, tuple(Replicate() if isinstance(p, Partial) else p
                                       for p in self.placements))

    def __str__(self) -> str:
        ranks = "" if self.mesh.ranks == tuple(range(self.mesh.size)) else \
            f" ranks {list(self.mesh.ranks)}"
        return f"[{', '.join(map(str, self.placements))}] on mesh {list(self.mesh.shape)}" \
               f"{ranks}"

    def to_dict(self) -> dict:
        return {"mesh": self.mesh.to_dict(),
                "placements": [_placement_to_json(p) for p in self.placements]}

    @classmethod
    def from_dict(cls, data, where: str = "layout") -> Layout:
        """The layout ``to_dict`` wrote; ``ProgramError`` naming ``where`` otherwise.
        Layouts read before are remembered (ops read theirs from their attributes on
        every run)."""
        key = _layout_key(data)
        found = None if key is None else _read.get(key)
        if found is not None:
            return found
        layout = cls._parse(data, where)
        if key is not None:
            if len(_read) > LAYOUTS_KEPT:
                _read.clear()
            _read[key] = layout
        return layout

    @classmethod
    def _parse(cls, data, where: str) -> Layout:
        expected = ("expected an object {'mesh': {'shape': [...], 'ranks': [...]}, "
                    "'placements': ['R' | 'P' | 'S(d)', ...]}")
        if not isinstance(data, dict) or set(data) != {"mesh", "placements"} or \
                not isinstance(data["mesh"], dict) or \
                set(data["mesh"]) != {"shape", "ranks"} or \
                not isinstance(data["placements"], list):
            raise ProgramError(f"{where}: {expected}, got {data!r:.200}")
        mesh = data["mesh"]
        if not all(isinstance(v, list) and all(type(x) is int for x in v)
                   for v in mesh.values()):
            raise ProgramError(f"{where}.mesh: expected lists of integers, got {mesh!r:.200}")
        try:
            return cls(DeviceMesh(mesh["shape"], mesh["ranks"]),
                       tuple(parse_placement(p) for p in data["placements"]))
        except ProgramError as exc:
            raise ProgramError(f"{where}: {exc}") from None


def _layout_key(data) -> tuple | None:
    """``(shape, ranks, placements)`` of a dict of exactly ``Layout.to_dict``'s form (lists
    of integers, a list of hashable placements), else None."""
    if type(data) is not dict or len(data) != 2:
        return None
    mesh, placements = data.get("mesh"), data.get("placements")
    if type(mesh) is not dict or len(mesh) != 2 or type(placements) is not list:
        return None
    shape, ranks = mesh.get("shape"), mesh.get("ranks")
    if type(shape) is not list or type(ranks) is not list or \
            not all(type(x) is int for x in shape + ranks):
        return None
    key = tuple(shape), tuple(ranks), tuple(placements)
    try:
        hash(key)
    except TypeError:
        return None
    return key


LAYOUTS_KEPT = 10_000
_read: dict = {}      # (shape, ranks, placements) -> the Layout from_dict made of them
_comms: dict = {}     # (shape, ranks) -> the communicator a mesh of them was made over


def known_comm(mesh: DeviceMesh, comm=None):
    """Remember ``comm`` for meshes like ``mesh`` (given), or the one remembered (a mesh
    read back from JSON has none of its own)."""
    key = (mesh.shape, mesh.ranks)
    if comm is not None:
        _comms[key] = comm
    return mesh.comm or _comms.get(key)


def parse_placement(text) -> Shard | Replicate | Partial:
    """``"R"``, ``"P"`` or ``"S(d)"`` as a placement."""
    if text == "R":
        return Replicate()
    if text == "P":
        return Partial()
    if isinstance(text, str) and text.startswith("S(") and text.endswith(")") and \
            text[2:-1].isdigit():
        return Shard(int(text[2:-1]))
    raise ProgramError(f"placement: expected 'R', 'P' or 'S(d)', got {text!r:.60}")


def _placement_to_json(placement) -> str:
    return str(placement)


def _flatten(ranks):
    for item in ranks:
        if isinstance(item, (list, tuple)) or hasattr(item, "__len__") and \
                not isinstance(item, str):
            yield from _flatten(item)
        else:
            yield item


def _unravel(index: int, shape: tuple) -> tuple:
    coord = []
    for d in reversed(shape):
        index, c = divmod(index, d)
        coord.append(c)
    return tuple(reversed(coord))
