"""The steps a redistribution is made of, and what each moves.

One step changes a layout into another with one communication pattern (or none):

| kind | change | how | bytes rank r receives (n: r's box, p: group size) |
|---|---|---|---|
| ``slice`` | R -> S, or any change where every new box lies in the old one | local copy | 0 |
| ``pad`` | R or S -> P on one mesh dimension | local: zeros but one summand | 0 |
| ``allgather`` | S(a) -> R on one mesh dimension | ``al.allgatherv`` on its lines | n_new - n_old |
| ``alltoall`` | S(a) -> S(b) on one mesh dimension | ``al.alltoallv`` on its lines | n_new - overlap |
| ``exchange`` | anything else without reducing (several mesh dimensions, another mesh) | ``al.multisendrecv`` | n_new - overlap |
| ``bcast`` | an exchange of the whole tensor from one rank to several | ``al.bcast`` over them | n_new |
| ``reduce_scatter`` | P -> S(a) on one mesh dimension | ``al.reduce_scatterv`` on its lines | (p-1) n_new |
| ``allreduce`` | P -> R on one mesh dimension | ``al.allreduce`` on its lines | (n - b) + (p-1) b |
| ``reduce`` | P on all mesh dims -> R on one rank | ``al.reduce`` | root: n per summand |

The moving steps receive exactly what a rank lacks: each missing piece once, from one
holder (of several replicas, the one nearest in mesh coordinates, so a one-dimension
change stays inside the lines of that dimension).  A reduction counts the bytes of the
bandwidth-optimal algorithm, reduce-scatter then allgather, with ``b`` the rank's
``array_split`` block of its ``n`` elements; a rank sends what the others receive from it,
``(n - b) + (p - 1) b`` for an allreduce, ``n - n_new`` for a reduce-scatter.  A
``reduce`` is the direct one (every summand to the root, summed there in rank order), the
step placement's replicas take to hand their gradients to one owner (placement/transfers.py
plans its transfers with this planner).  An exchange whose every piece is the whole tensor
from one rank, to two ranks or more, is a ``bcast`` over those ranks (placement's updated
parameters to the trainers); the other ranks of the meshes keep their own parts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .mesh import Layout, Partial, Replicate, Shard, split_bounds

KINDS = ("slice", "pad", "allgather", "alltoall", "exchange", "bcast", "reduce_scatter",
         "allreduce", "reduce")


@dataclass(frozen=True)
class Piece:
    """``box`` of the tensor, sent by rank ``source`` to rank ``target``."""

    source: int
    target: int
    box: tuple


@dataclass
class Step:
    """One step ``src`` -> ``dst`` of kind ``kind`` (on mesh dimension ``mesh_dim`` for the
    collectives), with the bytes each rank sends and receives."""

    kind: str
    src: Layout
    dst: Layout
    mesh_dim: int | None = None
    pieces: tuple = ()                       # the moving kinds' pieces
    sent: dict = field(default_factory=dict)       # rank -> bytes
    received: dict = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(self.received.values())

    def __str__(self) -> str:
        where = "" if self.mesh_dim is None else f" on mesh dim {self.mesh_dim}"
        return f"{self.kind}{where}: {self.src} -> {self.dst} ({self.bytes} bytes)"


def volume(box) -> int:
    count = 1
    for a, b in box:
        count *= max(0, b - a)
    return count


def intersect(a, b) -> tuple | None:
    box = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))
    return box if all(x < y for x, y in box) else None


def layouts_of(mesh, ndim: int) -> list[Layout]:
    """Every layout on ``mesh`` of a tensor with ``ndim`` dimensions."""
    choices = [Replicate(), Partial()] + [Shard(d) for d in range(ndim)]
    found = [()]
    for _ in range(mesh.ndim):
        found = [p + (c,) for p in found for c in choices]
    return [Layout(mesh, p) for p in found]


def step_between(src: Layout, dst: Layout, shape, itemsize: int) -> Step | None:
    """The one step from ``src`` to ``dst``, or None when there is none (a reduction of
    several mesh dimensions at once, a misaligned nested shard: those take several)."""
    if src.mesh != dst.mesh:
        if _sums_to_one_rank(src, dst):
            return _reduce_to_root(src, dst, shape, itemsize)
        if src.partial_dims or dst.partial_dims:
            return None
        return _from_one_rank(_moving("exchange", src, dst, None, shape, itemsize), shape)
    changed = [i for i, (a, b) in enumerate(zip(src.placements, dst.placements)) if a != b]
    if src.partial_dims == dst.partial_dims:
        kind, dim = "exchange", None
        if len(changed) == 1:
            dim = changed[0]
            kind = "allgather" if isinstance(dst.placements[dim], Replicate) else "alltoall"
        step = _moving(kind, src, dst, dim, shape, itemsize)
        if not step.pieces:
            step.kind, step.mesh_dim = "slice", None
        elif kind != "exchange" and not _within_lines(step.pieces, src.mesh, dim):
            step.kind, step.mesh_dim = "exchange", None
        elif kind == "allgather" and not _aligned(dst, src, dim, shape):
            step.kind = "alltoall"
        return _from_one_rank(step, shape)
    if len(changed) != 1:
        return None
    dim = changed[0]
    before, after = src.placements[dim], dst.placements[dim]
    if isinstance(before, Partial) and isinstance(after, Replicate):
        return _reduction("allreduce", src, dst, dim, shape, itemsize)
    if isinstance(before, Partial) and _aligned(src, dst, dim, shape):
        return _reduction("reduce_scatter", src, dst, dim, shape, itemsize)
    if isinstance(after, Partial) and (isinstance(before, Replicate) or
                                       _aligned(dst, src, dim, shape)):
        return Step("pad", src, dst, dim, (), _zeros(src, dst), _zeros(src, dst))
    return None


def _from_one_rank(step: Step, shape) -> Step:
    """``step``, a ``bcast`` where it is an exchange of the whole tensor from one rank to
    several."""
    whole = tuple((0, size) for size in shape)
    pieces = step.pieces
    if step.kind == "exchange" and len(pieces) > 1 and all(
            piece.source == pieces[0].source and piece.box == whole for piece in pieces):
        step.kind = "bcast"
    return step


def _sums_to_one_rank(src: Layout, dst: Layout) -> bool:
    """Whether ``src`` is summands on every mesh dimension and ``dst`` the whole tensor on
    one rank: what a ``reduce`` step does in one go."""
    return len(src.partial_dims) == src.mesh.ndim and dst.mesh.size == 1 \
        and not dst.partial_dims and all(isinstance(p, Replicate) for p in dst.placements)


def _reduce_to_root(src: Layout, dst: Layout, shape, itemsize: int) -> Step:
    """Every summand but the root's own (when the root holds one) sent to the root."""
    root, nbytes = dst.mesh.ranks[0], volume(tuple((0, size) for size in shape)) * itemsize
    sent, received = _zeros(src, dst), _zeros(src, dst)
    for rank in src.mesh.ranks:
        if rank != root:
            sent[rank] += nbytes
            received[root] += nbytes
    return Step("reduce", src, dst, None, (), sent, received)


def _zeros(*layouts) -> dict:
    return {r: 0 for layout in layouts for r in layout.mesh.ranks}


def _aligned(whole: Layout, parts: Layout, dim: int, shape) -> bool:
    """Whether, along every line of mesh dimension ``dim``, the boxes of ``parts`` are the
    consecutive array_split blocks of the line's common box in ``whole`` along the tensor
    dimension ``parts`` shards there."""
    axis = parts.placements[dim].dim
    for rank in whole.mesh.ranks:
        common = whole.box(rank, shape)
        coord = parts.mesh.coordinate(rank)[dim]
        start, stop = common[axis]
        a, b = split_bounds(stop - start, whole.mesh.shape[dim])[coord]
        expected = common[:axis] + ((start + a, start + b),) + common[axis + 1:]
        if parts.box(rank, shape) != expected:
            return False
    return True


def _within_lines(pieces, mesh, dim: int) -> bool:
    return all(p.source in mesh.line(p.target, dim) for p in pieces)


def _moving(kind, src: Layout, dst: Layout, dim, shape, itemsize) -> Step:
    pieces = tuple(exchange_pieces(src, dst, shape))
    sent, received = _zeros(src, dst), _zeros(src, dst)
    for piece in pieces:
        nbytes = volume(piece.box) * itemsize
        sent[piece.source] += nbytes
        received[piece.target] += nbytes
    return Step(kind, src, dst, dim, pieces, sent, received)


def exchange_pieces(src: Layout, dst: Layout, shape) -> list[Piece]:
    """What a non-reducing step moves: for each rank of ``dst``, the parts of its new box
    it does not hold yet, each from one holder of the same summand."""
    same_mesh = src.mesh == dst.mesh
    pieces = []
    for target in dst.mesh.ranks:
        want = dst.box(target, shape)
        key = dst.summand(target)
        own = src.box(target, shape) if same_mesh or target in src.mesh.ranks else None
        holders: dict[tuple, list] = {}
        for rank in src.mesh.ranks:
            if src.summand(rank) == key:
                holders.setdefault(src.box(rank, shape), []).append(rank)
        for box, ranks in holders.items():
            if box == own:
                continue
            part = intersect(box, want)
            if part is not None and volume(part) > 0:
                pieces.append(Piece(_nearest(ranks, target, src.mesh, same_mesh), target,
                                    part))
    return pieces


def _nearest(ranks: list, target: int, mesh, same_mesh: bool) -> int:
    if not same_mesh:      # spread the senders of replicated data over their replicas
        return ranks[target % len(ranks)]
    here = mesh.coordinate(target)
    return min(ranks, key=lambda r: (sum(a != b for a, b in zip(mesh.coordinate(r), here)),
                                     r))


def _reduction(kind, src: Layout, dst: Layout, dim: int, shape, itemsize) -> Step:
    sent, received = _zeros(src), _zeros(src)
    p = src.mesh.shape[dim]
    for rank in src.mesh.ranks:
        n = volume(src.box(rank, shape))
        coord = src.mesh.coordinate(rank)[dim]
        if p == 1:
            continue
        if kind == "allreduce":
            a, b = split_bounds(n, p)[coord]
            block = b - a
            sent[rank] = received[rank] = ((n - block) + (p - 1) * block) * itemsize
        else:
            block = volume(dst.box(rank, shape))
            sent[rank] = (n - block) * itemsize
            received[rank] = (p - 1) * block * itemsize
    return Step(kind, src, dst, dim, (), sent, received)
