"""Planning a redistribution: the route of steps (steps.py) with the fewest bytes moved.

The planner searches (Dijkstra) the graph whose nodes are every layout of the tensor on
the meshes involved (the source's, the target's and any given with ``via``) and whose
edges are the single steps between them, weighted by the bytes they move (the sum over
ranks of what each receives).  Its cost is therefore a shortest-path distance, and obeys
the triangle inequality over any three layouts on the meshes of one planner: going through
a third layout is a route the search already considered.  Ties go to fewer steps, then to
the first found in a fixed order, so every rank plans the same route.

What it finds that DTensor's greedy planner does not: Shard -> Shard over several mesh
dimensions in one exchange of exactly the missing pieces (DTensor gathers to Replicate
first); Partial over two mesh dimensions resolved by reduce-scatter, allreduce of the
smaller part, allgather (fewer bytes than two allreduces); Shard -> Partial by padding
(DTensor refuses it); layouts on different meshes (rank subsets); summands reduced to one
rank (placement's replicas handing their gradients to an owner), and through one rank
where that moves less.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ..errors import ProgramError
from .mesh import DeviceMesh, Layout
from .steps import Step, layouts_of, step_between


@dataclass(frozen=True)
class Redistribution:
    """The route from ``src`` to ``dst`` for a tensor of ``shape`` and ``dtype``."""

    src: Layout
    dst: Layout
    shape: tuple
    dtype: str
    steps: tuple

    @property
    def bytes(self) -> int:
        """Bytes moved: the sum over ranks of what each receives (= what all send)."""
        return sum(step.bytes for step in self.steps)

    def bytes_sent(self, rank: int) -> int:
        return sum(step.sent.get(rank, 0) for step in self.steps)

    def bytes_received(self, rank: int) -> int:
        return sum(step.received.get(rank, 0) for step in self.steps)

    @property
    def collectives(self) -> list[str]:
        """The kinds of the steps that communicate, in order."""
        return [step.kind for step in self.steps if step.kind not in ("slice", "pad")]

    def __str__(self) -> str:
        lines = [f"{self.src} -> {self.dst}, {self.dtype}{list(self.shape)}: "
                 f"{self.bytes} bytes"]
        lines += [f"  {step}" for step in self.steps]
        return "\n".join(lines)


def plan_redistribution(src: Layout, dst: Layout, shape, dtype="float32",
                        via=()) -> Redistribution:
    """The route with the fewest bytes from ``src`` to ``dst`` for a tensor of ``shape``
    (the whole tensor's, not a rank's) and ``dtype``; ``via``: more meshes the route may
    pass through.  Routes are remembered (the redistribute ops of a program ask for theirs
    on every run, and the search costs far more than the lookup)."""
    shape = tuple(shape)
    try:
        key = (src, dst, shape, dtype, tuple(via))
        found = _plans.get(key)
    except TypeError:       # (something unhashable: the checks below name it)
        found = key = None
    if found is not None and all(type(d) is int for d in shape):
        return found
    for name, layout in (("src", src), ("dst", dst)):
        if not isinstance(layout, Layout):
            raise ProgramError(f"{name}: expected a Layout, got {type(layout).__name__}")
    if not all(type(d) is int and d >= 0 for d in shape):
        raise ProgramError(f"shape: expected the tensor's sizes (integers >= 0), got "
                           f"{list(shape)}")
    src.check(shape, "src")
    dst.check(shape, "dst")
    itemsize = np.dtype(dtype).itemsize
    meshes = list(dict.fromkeys([src.mesh, dst.mesh, *via, *_roots(src, dst)]))
    steps = _shortest(src, dst, shape, itemsize, meshes)
    if steps is None:
        raise ProgramError(f"redistribution: no route from {src} to {dst} for shape "
                           f"{list(shape)}")
    plan = Redistribution(src, dst, shape, str(np.dtype(dtype)), tuple(steps))
    if key is not None:
        if len(_plans) > PLANS_KEPT:
            _plans.clear()
        _plans[key] = plan
    return plan


PLANS_KEPT = 10_000
_plans: dict = {}


def _roots(src: Layout, dst: Layout) -> list[DeviceMesh]:
    """Where summands moving to another mesh may be reduced to: one rank of either mesh (a
    ``reduce`` step, then from there on), so that no other mesh could shorten the route.
    (On one mesh a detour through one rank moves no fewer bytes than the mesh's own
    reductions: reduce and bcast back, 2(p-1)n, are an allreduce's.)"""
    if not src.partial_dims or src.mesh == dst.mesh:
        return []
    return [DeviceMesh((1,), (rank,)) for rank in dict.fromkeys(src.mesh.ranks +
                                                                dst.mesh.ranks)]


def _shortest(src: Layout, dst: Layout, shape, itemsize: int, meshes) -> list | None:
    nodes = [layout for mesh in meshes for layout in layouts_of(mesh, len(shape))]
    order = {layout: i for i, layout in enumerate(nodes)}
    best = {src: (0, 0)}
    back: dict[Layout, tuple] = {}
    heap = [(0, 0, order[src], src)]
    done = set()
    while heap:
        cost, count, _, here = heapq.heappop(heap)
        if here in done:
            continue
        done.add(here)
        if here == dst:
            break
        for there in nodes:
            if there == here or there in done:
                continue
            step = _step(here, there, shape, itemsize)
            if step is None:
                continue
            key = (cost + step.bytes, count + 1)
            if key < best.get(there, (float("inf"), 0)):
                best[there] = key
                back[there] = (here, step)
                heapq.heappush(heap, (*key, order[there], there))
    if dst not in done:
        return None
    steps, at = [], dst
    while at != src:
        at, step = back[at]
        steps.append(step)
    return steps[::-1]


_cache: dict = {}


def _step(src: Layout, dst: Layout, shape, itemsize: int) -> Step | None:
    key = (src, dst, shape, itemsize)
    if key not in _cache:
        if len(_cache) > 200_000:
            _cache.clear()
        _cache[key] = step_between(src, dst, shape, itemsize)
    return _cache[key]
