"""Layouts and the redistribution planner (aluminum/executor/layouts/), in one process, plus
the one 4-rank job of tests/mpi/layouts_ranks.py (every pair against numpy, bytes,
gradients).

The costs here are checked against references written in the test from numpy alone:
the least a non-reducing redistribution can move (each rank receives the elements it
lacks), and torch DTensor's greedy route for the same pair (read from torch itself by
tests/dtensor_routes.py), each of its steps costed as its collective moves.
"""
import functools
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers
from test_multirank import run_ranks

HERE = Path(__file__).parent
CHOICES = ("R", "S0", "S1", "P")
MESHES = {"1": (1,), "2": (2,), "3": (3,), "4": (4,), "2x2": (2, 2)}
ITEMSIZE = 8


def test_every_pair_on_four_ranks(tmp_path):
    run_ranks("layouts_ranks.py", 4, tmp_path)


# -- references in numpy alone --------------------------------------------------------------

def coords(mesh_shape):
    return list(itertools.product(*[range(d) for d in mesh_shape]))


def indices(mesh_shape, placements, coord, shape):
    idx = [np.arange(n) for n in shape]
    for i, p in enumerate(placements):
        if p.startswith("S"):
            idx[int(p[1])] = np.array_split(idx[int(p[1])], mesh_shape[i])[coord[i]]
    return idx


def held(mesh_shape, placements, coord, shape) -> int:
    return int(np.prod([len(i) for i in indices(mesh_shape, placements, coord, shape)]))


def overlap(mesh_shape, a, b, coord, shape) -> int:
    ia, ib = indices(mesh_shape, a, coord, shape), indices(mesh_shape, b, coord, shape)
    return int(np.prod([len(np.intersect1d(x, y)) for x, y in zip(ia, ib)]))


def lacking(mesh_shape, a, b, shape) -> int:
    """Elements the ranks lack for ``b`` when they hold ``a`` (no Partial)."""
    return sum(held(mesh_shape, b, c, shape) - overlap(mesh_shape, a, b, c, shape)
               for c in coords(mesh_shape))


def dtensor_step_bytes(mesh_shape, placements, dim, before, after, shape) -> int:
    """Bytes a DTensor step moves, as its collective does: allgather / all-to-all the
    missing elements, allreduce (n - b) + (p - 1) b per rank, reduce-scatter (p - 1) n_new
    per rank; local steps nothing.  Shard -> Partial, which DTensor refuses at run time,
    costs the allgather it takes to do by hand."""
    p = mesh_shape[dim]
    new = list(placements)
    new[dim] = after
    if after == "P":
        if before == "R":
            return 0
        new[dim] = "R"
    if before != "P":
        return lacking(mesh_shape, placements, new, shape) * ITEMSIZE
    total = 0
    for c in coords(mesh_shape):
        n = held(mesh_shape, placements, c, shape)
        if after == "R":
            b = len(np.array_split(np.arange(n), p)[c[dim]])
            total += (n - b) + (p - 1) * b
        else:
            total += (p - 1) * held(mesh_shape, new, c, shape)
    return total * ITEMSIZE


@functools.lru_cache(maxsize=None)
def dtensor_routes(shape):
    text = subprocess.run([sys.executable, str(HERE / "dtensor_routes.py"),
                           ",".join(map(str, shape))], capture_output=True, text=True,
                          check=True, timeout=120).stdout
    return json.loads(text)


# -- the library's side --------------------------------------------------------------------

def layout(placements, mesh_shape=None, ranks=None):
    mesh = ex.DeviceMesh(mesh_shape, ranks)
    return ex.Layout(mesh, [ex.Replicate() if p == "R" else ex.Partial() if p == "P"
                            else ex.Shard(int(p[1])) for p in placements])


def cost(src, dst, mesh_shape, shape, via=()):
    return ex.plan_redistribution(layout(src, mesh_shape), layout(dst, mesh_shape), shape,
                                  "float64", via=via).bytes


PAIRS = [(name, src, dst) for name, mesh_shape in MESHES.items()
         for src in itertools.product(CHOICES, repeat=len(mesh_shape))
         for dst in itertools.product(CHOICES, repeat=len(mesh_shape))]


@pytest.mark.parametrize("shape", [(12, 12), (5, 3)], ids=["even", "uneven"])
def test_the_plan_never_moves_more_than_dtensors_greedy_route(shape):
    routes, worse, better = dtensor_routes(shape), [], []
    for name, src, dst in PAIRS:
        mesh_shape = MESHES[name]
        theirs, placements = 0, list(src)
        for dim, before, after in routes["|".join((name, ",".join(src), ",".join(dst)))]:
            assert placements[dim] == before
            theirs += dtensor_step_bytes(mesh_shape, placements, dim, before, after, shape)
            placements[dim] = after
        assert tuple(placements) == dst
        ours = cost(src, dst, mesh_shape, shape)
        if ours > theirs:
            worse.append((name, src, dst, ours, theirs))
        if ours < theirs:
            better.append((name, src, dst))
    assert not worse
    multi_dim = [(s, d) for s in itertools.product(("S0", "S1"), repeat=2)
                 for d in itertools.product(("S0", "S1"), repeat=2)
                 if s[0] != d[0] and s[1] != d[1]]
    assert multi_dim and all(("2x2", s, d) in better for s, d in multi_dim)


def test_shard_to_shard_on_two_mesh_dimensions_is_one_exchange_of_the_missing_elements():
    plan = ex.plan_redistribution(layout(("S0", "S1"), (2, 2)), layout(("S1", "S0"), (2, 2)),
                                  (4, 6), "float64")
    assert plan.collectives == ["exchange"]
    assert plan.bytes == lacking((2, 2), ("S0", "S1"), ("S1", "S0"), (4, 6)) * ITEMSIZE


@pytest.mark.parametrize("ranks, sent", [((3, 1), {3: 120, 1: 120}),
                                         ((0, 1, 2), {0: 120, 1: 120})],
                         ids=["root-outside", "root-inside"])
def test_summands_reduce_to_one_rank_in_one_step(ranks, sent):
    """Summands on a mesh to the whole tensor on rank 2: one direct reduce, every summand
    rank 2 lacks sent to it once (5 x 3 float64: 120 bytes each)."""
    plan = ex.plan_redistribution(layout(("P",), (len(ranks),), ranks),
                                  layout(("R",), (1,), (2,)), (5, 3), "float64")
    assert plan.collectives == ["reduce"]
    assert {r: plan.bytes_sent(r) for r in sent} == sent
    assert plan.bytes_received(2) == 240 and plan.bytes == 240


def test_the_whole_tensor_from_one_rank_to_several_is_one_bcast():
    """Rank 2's whole tensor (5 x 3 float64, 120 bytes) wanted on ranks 0, 1 and 3: one
    bcast, 120 bytes to each; to one rank it is a plain exchange."""
    plan = ex.plan_redistribution(layout(("R",), (1,), (2,)), layout(("R",), (3,), (0, 1, 3)),
                                  (5, 3), "float64")
    assert plan.collectives == ["bcast"]
    assert plan.bytes_sent(2) == 360
    assert [plan.bytes_received(r) for r in (0, 1, 3)] == [120, 120, 120]
    alone = ex.plan_redistribution(layout(("R",), (1,), (2,)), layout(("R",), (1,), (0,)),
                                   (5, 3), "float64")
    assert alone.collectives == ["exchange"]


def test_summands_for_several_ranks_of_another_mesh_go_through_one_of_them():
    """Summands on 4 ranks wanted whole on ranks 1, 2, 3 (4 x 4 float64, n = 128 bytes):
    reduced to rank 1 (3n, its own summand stays), then broadcast from it to ranks 2 and 3
    (2n): 640 bytes, where reduce-scatter and gathering the blocks move 3n + 3 x 3n/4 =
    672."""
    plan = ex.plan_redistribution(layout(("P",), (4,)), layout(("R",), (3,), (1, 2, 3)),
                                  (4, 4), "float64")
    assert plan.collectives == ["reduce", "bcast"]
    assert plan.bytes == 640


@settings(max_examples=60, deadline=None, derandomize=True)
@given(mesh=st.sampled_from(list(MESHES.values())), data=st.data(),
       shape=st.tuples(st.integers(1, 7), st.integers(1, 7)))
def test_a_redistribution_without_partial_moves_exactly_what_ranks_lack(mesh, data, shape):
    pick = st.tuples(*[st.sampled_from(("R", "S0", "S1"))] * len(mesh))
    src, dst = data.draw(pick), data.draw(pick)
    assert cost(src, dst, mesh, shape) == lacking(mesh, src, dst, shape) * ITEMSIZE


UNIVERSE = [((4,), None), ((2, 2), None), ((2,), (0, 1)), ((2,), (3, 2)), ((3,), (1, 2, 3)),
            ((1,), (2,))]


def layouts_on(index):
    mesh_shape, ranks = UNIVERSE[index]
    return st.tuples(*[st.sampled_from(CHOICES)] * len(mesh_shape)).map(
        lambda p: layout(p, mesh_shape, ranks))


any_layout = st.integers(0, len(UNIVERSE) - 1).flatmap(layouts_on)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(a=any_layout, b=any_layout, c=any_layout,
       shape=st.tuples(st.integers(1, 6), st.integers(1, 6)))
def test_the_cost_obeys_the_triangle_inequality(a, b, c, shape):
    via = [ex.DeviceMesh(s, r) for s, r in UNIVERSE]

    def d(x, y):
        return ex.plan_redistribution(x, y, shape, "float64", via=via).bytes

    assert d(a, c) <= d(a, b) + d(b, c)
    assert d(a, a) == 0


@settings(max_examples=60, deadline=None, derandomize=True)
@given(a=any_layout, c=any_layout, shape=st.tuples(st.integers(1, 6), st.integers(1, 6)))
def test_other_meshes_never_shorten_a_route(a, c, shape):
    """So a plan between two meshes is the one over every mesh: the triangle inequality
    holds for plans made without ``via`` too."""
    via = [ex.DeviceMesh(s, r) for s, r in UNIVERSE]
    assert ex.plan_redistribution(a, c, shape, "float64").bytes == \
        ex.plan_redistribution(a, c, shape, "float64", via=via).bytes


# -- the IR: a layout is a variable attribute that survives JSON ------------------------

@settings(max_examples=40, deadline=None, derandomize=True)
@given(x=any_layout, shape=st.tuples(st.integers(1, 6), st.integers(1, 6)))
def test_layouts_survive_to_json_and_from_json(x, shape):
    main = ex.Program()
    with ex.program_guard(main, ex.Program()):
        var = layers.data("x", list(shape), "float64", append_batch_size=False)
        var.layout = x
        y = layers.redistribute(var, ex.Layout(x.mesh, [ex.Replicate()] * x.mesh.ndim))
    loaded = ex.Program.from_json(main.to_json())
    assert loaded.global_block().var("x").layout == x
    assert loaded.global_block().var(y.name).layout == y.layout
    assert loaded.to_json() == main.to_json()


# -- bad input: ProgramError naming the argument, expected vs given ------------------------

class _Comm:
    size, rank = 2, 0


@pytest.mark.parametrize("make, message", [
    (lambda: ex.DeviceMesh((2, 2, 2)), r"DeviceMesh shape: expected 1 or 2 positive"),
    (lambda: ex.DeviceMesh((2, 2), [0, 1, 2]), r"expected 4 ranks for shape \[2, 2\], got 3"),
    (lambda: ex.DeviceMesh(2, [1, 1]), r"expected distinct ranks >= 0, got \[1, 1\]"),
    (lambda: ex.DeviceMesh(4, comm=_Comm()), r"a mesh larger than the communicator"),
    (lambda: ex.Layout(ex.DeviceMesh((2, 2)), [ex.Shard(0)]),
     r"expected 2 of Shard\(d\), Replicate\(\), Partial\(\).*got \['S\(0\)'\]"),
    (lambda: ex.Partial("max"), r"Partial.reduce_op: expected 'sum', got 'max'"),
    (lambda: ex.Shard(-1), r"Shard.dim: expected a tensor dimension >= 0, got -1"),
    (lambda: ex.plan_redistribution(layout(("S1",), (2,)), layout(("R",), (2,)), (4,)),
     r"src: \[S\(1\)\] on mesh \[2\] shards dimension 1, but the tensor has shape \[4\]"),
    (lambda: ex.plan_redistribution(layout(("R",), (2,)), "R", (4,)),
     r"dst: expected a Layout, got str"),
    (lambda: ex.plan_redistribution(layout(("R",), (2,)), layout(("R",), (2,)), (-1, 3)),
     r"shape: expected the tensor's sizes \(integers >= 0\), got \[-1, 3\]"),
])
def test_bad_input_is_a_program_error_naming_it(make, message):
    with pytest.raises(ex.ProgramError, match=message):
        make()
    assert issubclass(ex.ProgramError, al.AluminumError)


def test_a_malformed_layout_in_program_json_is_a_program_error_naming_the_field():
    main = ex.Program()
    with ex.program_guard(main, ex.Program()):
        var = layers.data("x", [4], "float64", append_batch_size=False)
        var.layout = layout(("S0",), (2,))
    text = main.to_json().replace('"S(0)"', '"S(x)"')
    with pytest.raises(ex.ProgramError, match=r"blocks\[0\]\.vars\[0\]\.layout: placement: "
                                              r"expected 'R', 'P' or 'S\(d\)', got 'S\(x\)'"):
        ex.Program.from_json(text)


def test_a_wrong_local_part_is_a_program_error_before_anything_moves():
    with al.MPICommunicator() as comm:     # one rank: its part of [S(0)] on mesh [1] is all
        src = layout(("S0",), (1,))
        with pytest.raises(ex.ProgramError, match=r"local: expected rank 0's part of "
                                                  r"\[S\(0\)\] on mesh \[1\].*shape \[4, 2\], "
                                                  r"got shape \[3, 2\]"):
            ex.redistribute(np.zeros((3, 2)), src, layout(("R",), (1,)), (4, 2), comm)
        with pytest.raises(ex.ProgramError, match=r"the mesh .* is larger than the "
                                                  r"communicator \(1 ranks\)"):
            ex.redistribute(np.zeros((2, 2)), layout(("S0",), (2,)), src, (4, 2), comm)


def test_a_route_or_layout_read_before_is_checked_as_strictly_again():
    """Routes and layouts read from JSON are remembered (ops read theirs on every run); a
    call that the first would have refused is refused after it too, and the route found
    again is the same one."""
    src, dst = layout(("S1",), (2,)), layout(("R",), (2,))
    first = ex.plan_redistribution(src, dst, (4, 6), "float64")
    assert ex.plan_redistribution(src, dst, [4, 6], np.float64).steps == first.steps
    with pytest.raises(ex.ProgramError, match=r"shape: expected the tensor's sizes"):
        ex.plan_redistribution(src, dst, (4, True), "float64")
    data = src.to_dict()
    assert ex.Layout.from_dict(data) == src and ex.Layout.from_dict(data) == src
    for bad in ({**data, "placements": tuple(data["placements"])},
                {**data, "mesh": {"shape": [2], "ranks": [0, True]}},   # == [0, 1]
                {**data, "extra": 1}):
        with pytest.raises(ex.ProgramError, match=r"where(\.mesh)?: expected"):
            ex.Layout.from_dict(bad, "where")
