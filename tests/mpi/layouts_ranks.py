"""Redistribution on 4 ranks, DTensor's test style (tests/test_layouts.py launches it once).

Every pair of layouts from {R, S(0), S(1), P} per mesh dimension, on meshes (1), (2), (3),
(4) and (2, 2) (rank subsets of the job, in orders other than the ranks'), and between
different meshes; shapes even, uneven, and with empty shards.  Each case checks, against
references written here in numpy alone:

- the output: the parts every rank holds, gathered with mpi4py, are the boxes that
  ``numpy.array_split`` of the index ranges gives, replicas equal, summands adding up to
  the whole tensor the input parts came from;
- the bytes: what the runtime counted on each rank equals the plan's prediction;
- the gradient (float64): the input gradient of L(X) = sum(W * sin(X)) through the
  redistribution, under both gradient conventions (a replicated output gradient, and
  summands), against central differences of L in numpy (the forward, checked on the same
  layouts above, is the identity on the whole tensor).
"""
import itertools

import numpy as np
import pytest
from mpi4py import MPI

import aluminum as al
import aluminum.executor as ex
from aluminum.executor import layers

WORLD = MPI.COMM_WORLD
pytestmark = pytest.mark.skipif(WORLD.Get_size() != 4, reason="needs 4 ranks")

MESHES = {"1": ((1,), [2]), "2": ((2,), [3, 1]), "3": ((3,), [0, 1, 2]),
          "4": ((4,), [0, 1, 2, 3]), "2x2": ((2, 2), [0, 1, 2, 3]),
          "2x2'": ((2, 2), [3, 2, 1, 0])}
SAME_MESH = ["1", "2", "3", "4", "2x2"]
ACROSS = [("2x2", "2x2'"), ("3", "2x2"), ("2x2", "3"), ("2", "4"), ("1", "3"), ("3", "1"),
          ("2", "1")]
SHAPES = {"even": (12, 12), "uneven": (5, 3), "empty shards": (3, 1)}
CHOICES = ("R", "S0", "S1", "P")
SKIP_PARTIAL_ACROSS = (SHAPES["even"], SHAPES["empty shards"])


@pytest.fixture(scope="module")
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


# -- the reference: numpy alone ------------------------------------------------------------

def coordinate(mesh, rank):
    shape, ranks = MESHES[mesh]
    return np.unravel_index(ranks.index(rank), shape) if rank in ranks else None


def indices(mesh, placements, rank, shape):
    """Rank's index arrays per tensor dimension: nested numpy.array_split."""
    mesh_shape, _ = MESHES[mesh]
    coord = coordinate(mesh, rank)
    idx = [np.arange(n) for n in shape]
    for i, p in enumerate(placements):
        if p.startswith("S"):
            d = int(p[1])
            idx[d] = np.array_split(idx[d], mesh_shape[i])[coord[i]]
    return idx


def summand(mesh, placements, rank):
    coord = coordinate(mesh, rank)
    return tuple(int(coord[i]) for i, p in enumerate(placements) if p == "P")


def summands(mesh, placements, full, seed):
    """The summands of ``full`` for the Partial dimensions: random, the last the rest."""
    mesh_shape, _ = MESHES[mesh]
    keys = list(itertools.product(*[range(mesh_shape[i]) for i, p in enumerate(placements)
                                    if p == "P"]))
    rng = np.random.default_rng(seed)
    parts = {k: rng.normal(size=full.shape) for k in keys[:-1]}
    parts[keys[-1]] = full - sum(parts.values()) if parts else full
    return parts


def part_of(mesh, placements, rank, parts):
    if coordinate(mesh, rank) is None:
        return None
    idx = indices(mesh, placements, rank, next(iter(parts.values())).shape)
    return np.ascontiguousarray(parts[summand(mesh, placements, rank)][np.ix_(*idx)])


def assemble(mesh, placements, local, shape):
    """The whole tensor from every rank's part (gathered with mpi4py): replicas must be
    equal, summands are added."""
    every = WORLD.allgather(local)
    _, ranks = MESHES[mesh]
    seen, total = {}, np.zeros(shape)
    for rank in ranks:
        idx = indices(mesh, placements, rank, shape)
        value = every[rank]
        assert value is not None and value.shape == tuple(len(i) for i in idx), \
            f"rank {rank}: part of shape {None if value is None else value.shape}"
        key = (summand(mesh, placements, rank), tuple(tuple(i) for i in idx))
        if key in seen:
            np.testing.assert_array_equal(value, seen[key], err_msg=f"replica on rank {rank}")
            continue
        seen[key] = value
        total[np.ix_(*idx)] += value
    for rank in range(WORLD.Get_size()):
        if rank not in ranks:
            assert every[rank] is None, f"rank {rank} is off the mesh but holds a part"
    return total


# -- the library's side ------------------------------------------------------------------

_meshes = {}


def layout(mesh, placements):
    if mesh not in _meshes:
        shape, ranks = MESHES[mesh]
        _meshes[mesh] = ex.DeviceMesh(shape, ranks)
    made = [ex.Replicate() if p == "R" else ex.Partial() if p == "P" else ex.Shard(int(p[1]))
            for p in placements]
    return ex.Layout(_meshes[mesh], made)


def swap_rp(placements):
    return tuple({"R": "P", "P": "R"}.get(p, p) for p in placements)


def gradient_layout(placements):
    return tuple("R" if p == "P" else p for p in placements)


def cases(pairs_of_meshes, shapes):
    for (a, b), shape in itertools.product(pairs_of_meshes, shapes):
        ndim = len(MESHES[a][0]), len(MESHES[b][0])
        for src in itertools.product(CHOICES, repeat=ndim[0]):
            for dst in itertools.product(CHOICES, repeat=ndim[1]):
                if a != b and ("P" in src or "P" in dst) and shape in SKIP_PARTIAL_ACROSS:
                    continue    # across meshes: Partial not on every shape (time)
                yield a, src, b, dst, shape


def run_case(comm, a, src, b, dst, shape, seed):
    rank = comm.rank
    full = np.random.default_rng(seed).normal(size=shape)
    local = part_of(a, src, rank, summands(a, src, full, seed + 1))
    plan = ex.plan_redistribution(layout(a, src), layout(b, dst), shape, "float64")
    with ex.count_traffic() as traffic:
        out = ex.redistribute(local, layout(a, src), layout(b, dst), shape, comm,
                              dtype="float64", plan=plan)
    what = f"{a} {src} -> {b} {dst} {shape}: {plan}"
    np.testing.assert_allclose(assemble(b, dst, out, shape), full, rtol=1e-12, atol=1e-12,
                               err_msg=what)
    # compared on every rank alike, so a mismatch on one rank fails all of them at once
    counted = WORLD.allgather((traffic.sent, traffic.received))
    predicted = [(plan.bytes_sent(r), plan.bytes_received(r)) for r in range(WORLD.size)]
    assert counted == predicted, what
    assert sum(r for _, r in counted) == plan.bytes == sum(s for s, _ in counted)
    return plan


def test_every_pair_on_every_mesh_matches_numpy_and_the_predicted_bytes(comm):
    count = 0
    pairs = [(m, m) for m in SAME_MESH]
    for seed, (a, src, b, dst, shape) in enumerate(cases(pairs, SHAPES.values())):
        run_case(comm, a, src, b, dst, shape, seed)
        count += 1
    assert count == 3 * (4 * 4 * 4 + 16 * 16)


def test_every_pair_across_meshes_matches_numpy_and_the_predicted_bytes(comm):
    for seed, (a, src, b, dst, shape) in enumerate(cases(ACROSS, SHAPES.values())):
        run_case(comm, a, src, b, dst, shape, seed)


def central_differences(weights, full, h=1e-5):
    """dL/dX of L(X) = sum(W * sin(X)) by central differences in every element, in numpy:
    the redistribution is the identity on the whole tensor (the pair tests above check the
    forward on the same layouts), so L of the redistributed X is L of X."""
    numeric = np.zeros(full.shape)
    for index in np.ndindex(*full.shape):
        step = np.zeros(full.shape)
        step[index] = h
        numeric[index] = (np.sum(weights * np.sin(full + step))
                          - np.sum(weights * np.sin(full - step))) / (2 * h)
    return numeric


def test_gradient_of_every_pair_equals_central_differences(comm):
    """Float64: the whole input gradient, under both conventions, against central
    differences of L in every element of X."""
    shape = (3, 2)
    weights = np.random.default_rng(7).normal(size=shape)
    pairs = [(m, m) for m in SAME_MESH] + [("3", "2x2"), ("2", "4"), ("2", "1")]
    count = 0
    for seed, (a, src, b, dst, _) in enumerate(cases(pairs, [shape])):
        full = np.random.default_rng(seed).normal(size=shape)
        forward_src, forward_dst = layout(a, src), layout(b, dst)
        numeric = central_differences(weights, full)
        grad_out = weights * np.cos(full)          # dL/dY, Y = X
        for grad_dst, grad_src in ((gradient_layout(dst), gradient_layout(src)),
                                   (swap_rp(dst), swap_rp(src))):
            dout = part_of(b, grad_dst, comm.rank, summands(b, grad_dst, grad_out, seed))
            din = ex.redistribute_backward(
                dout, forward_src, forward_dst, shape, comm, dtype="float64",
                grad_layout=layout(b, grad_dst), input_grad_layout=layout(a, grad_src))
            np.testing.assert_allclose(
                assemble(a, grad_src, din, shape), numeric, rtol=1e-7, atol=1e-9,
                err_msg=f"{a} {src} -> {b} {dst}, output gradient as {grad_dst}")
        count += 1
    assert count == 4 * 4 * 4 + 16 * 16 + 4 * 16 + 4 * 4 + 4 * 4


def test_append_backward_goes_through_a_redistribution(comm):
    """A program: x laid out [S(0), S(1)] on the 2x2 mesh, y = x as [R, R], loss =
    mean(y * y) (the same on every rank); x@GRAD is each rank's part of 2 X / numel."""
    shape = (5, 3)
    mesh = ex.DeviceMesh((2, 2), comm=comm)
    main, startup = ex.Program(), ex.Program()
    with ex.program_guard(main, startup):
        x = layers.create_parameter(shape, "float64", name="x")
        x.layout = ex.Layout(mesh, (ex.Shard(0), ex.Shard(1)))
        y = layers.redistribute(x, ex.Layout(mesh, (ex.Replicate(), ex.Replicate())))
        out = layers.mean(layers.elementwise_mul(y, y))
        (_, grad), = ex.append_backward(out)
    program = ex.Program.from_json(main.to_json())     # the layouts survive the trip
    assert program.global_block().var("x").layout == x.layout
    full = np.random.default_rng(3).normal(size=shape)
    idx = indices("2x2", ("S0", "S1"), comm.rank, shape)
    scope = ex.Scope()
    scope["x"] = np.ascontiguousarray(full[np.ix_(*idx)])
    value, dx = ex.Executor().run(program, fetch_list=[out.name, grad.name], scope=scope)
    np.testing.assert_allclose(value, np.mean(full * full), rtol=1e-12)
    np.testing.assert_allclose(dx, (2 * full / full.size)[np.ix_(*idx)], rtol=1e-12)
