"""torch.distributed's documented collectives on the "aluminum" backend against gloo, in the
same job: every call runs once on each group and the outputs must agree (exactly for
integers and bool, to float tolerance otherwise).  Where gloo has no such call (AVG,
PREMUL_SUM, bool reductions, uneven all_gather) the reference is computed with torch from
every rank's input, gathered over gloo."""
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import aluminum as al  # noqa: E402
import aluminum.torch as altorch  # noqa: E402

from torch_groups import PREMUL_READABLE  # noqa: E402

Op = dist.ReduceOp
# torch 2.13 renamed all_gather_into_tensor / reduce_scatter_tensor; the documented names stay
pytestmark = pytest.mark.filterwarnings("ignore:.*is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def groups():
    """(aluminum default group, gloo group over the same ranks)."""
    dist.init_process_group("aluminum")        # no arguments: the import set the rendezvous
    gloo = dist.new_group(backend="gloo")
    yield dist.group.WORLD, gloo
    dist.destroy_process_group()


def rank_tensor(rank, shape=(5,), dtype=torch.float32, seed=0):
    """Small integers (exact sums and products in every dtype), different per rank."""
    generator = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, 4, shape, generator=generator).to(dtype)


def both(groups, call, *tensors_fn, async_op=False):
    """Run ``call(group, *tensors)`` on each group with fresh tensors; the two tensor sets."""
    results = []
    for group in groups:
        tensors = [make() for make in tensors_fn]
        work = call(group, *tensors, async_op=async_op)
        if async_op:
            assert work is not None
            work.wait()
        results.append(tensors)
    return results


def assert_same(actual, expected):
    if isinstance(actual, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
        return
    exact = not (actual.dtype.is_floating_point or actual.dtype.is_complex)
    tol = {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(actual.dtype, 1e-6)
    torch.testing.assert_close(actual, expected, rtol=0 if exact else tol,
                               atol=0 if exact else tol)


def everyone(gloo, tensor):
    """Every rank's ``tensor``, gathered over gloo (the reference's input)."""
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor, group=gloo)
    return out


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.uint8]


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("op", [Op.SUM, Op.PRODUCT, Op.MIN, Op.MAX])
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce(groups, dtype, op, async_op):
    rank = dist.get_rank()
    ours, gloo = both(groups, lambda g, t, async_op: dist.all_reduce(t, op, g, async_op),
                      lambda: rank_tensor(rank, (7, 3), dtype), async_op=async_op)
    assert_same(ours, gloo)


@pytest.mark.parametrize("op", [Op.BAND, Op.BOR, Op.BXOR])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_all_reduce_bitwise(groups, dtype, op):
    rank = dist.get_rank()
    ours, gloo = both(groups, lambda g, t, async_op: dist.all_reduce(t, op, g, async_op),
                      lambda: rank_tensor(rank, (9,), dtype))
    assert_same(ours, gloo)


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_all_reduce_avg_is_the_mean(groups, dtype, async_op):
    rank, (ours, gloo) = dist.get_rank(), groups
    tensor = rank_tensor(rank, (11,), dtype)
    expected = torch.stack(everyone(gloo, tensor)).double().mean(0).to(dtype)
    work = dist.all_reduce(tensor, Op.AVG, ours, async_op)
    if async_op:
        work.wait()
    assert_same(tensor, expected)


def test_all_reduce_premul_sum(groups):
    rank, (ours, gloo) = dist.get_rank(), groups
    tensor = rank_tensor(rank, (6,), torch.float64)
    expected = torch.stack(everyone(gloo, tensor)).sum(0) * 0.5
    if not PREMUL_READABLE:   # an older torch: a clear refusal, the tensor untouched
        before = tensor.clone()
        with pytest.raises(al.UnsupportedError, match="PREMUL_SUM's factor"):
            dist.all_reduce(tensor, dist._make_nccl_premul_sum(0.5), ours)
        assert_same(tensor, before)
        return
    dist.all_reduce(tensor, dist._make_nccl_premul_sum(0.5), ours)
    assert_same(tensor, expected)


@pytest.mark.parametrize("op,reference", [(Op.SUM, "any"), (Op.MAX, "any"),
                                          (Op.PRODUCT, "all"), (Op.MIN, "all")])
def test_all_reduce_bool_is_logical(groups, op, reference):
    rank, (ours, gloo) = dist.get_rank(), groups
    tensor = rank_tensor(rank, (16,), torch.bool)
    stacked = torch.stack(everyone(gloo, tensor))
    expected = stacked.any(0) if reference == "any" else stacked.all(0)
    dist.all_reduce(tensor, op, ours)
    assert_same(tensor, expected)


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_broadcast_from_every_root(groups, dtype, async_op):
    rank = dist.get_rank()
    for root in range(dist.get_world_size()):
        ours, gloo = both(groups, lambda g, t, async_op: dist.broadcast(t, root, g, async_op),
                          lambda: rank_tensor(rank, (4, 2), dtype, seed=root),
                          async_op=async_op)
        assert_same(ours, gloo)


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_all_gather(groups, dtype, async_op):
    rank, size = dist.get_rank(), dist.get_world_size()

    def call(group, source, async_op):
        outputs = [torch.empty(2, 3, dtype=dtype) for _ in range(size)]
        work = dist.all_gather(outputs, source, group, async_op)
        if async_op:
            work.wait()
        return outputs
    results = [call(group, rank_tensor(rank, (2, 3), dtype), async_op) for group in groups]
    assert_same(*results)


def test_all_gather_uneven_sizes(groups):
    rank, size, (ours, gloo) = dist.get_rank(), dist.get_world_size(), groups
    outputs = [torch.empty(r + 1) for r in range(size)]
    dist.all_gather(outputs, torch.full((rank + 1,), float(rank)), ours)
    assert_same(outputs, [torch.full((r + 1,), float(r)) for r in range(size)])


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("stacked", [False, True])
def test_all_gather_into_tensor(groups, stacked, async_op):
    rank, size, (ours, gloo) = dist.get_rank(), dist.get_world_size(), groups
    output = torch.empty((size, 2, 3) if stacked else (2 * size, 3))   # gloo: concat only
    work = dist.all_gather_into_tensor(output, rank_tensor(rank, (2, 3)), ours, async_op)
    if async_op:
        work.wait()
    expected = torch.empty(2 * size, 3)
    dist.all_gather_into_tensor(expected, rank_tensor(rank, (2, 3)), gloo)
    assert_same(output.reshape(2 * size, 3), expected)


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("op", [Op.SUM, Op.MAX])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_reduce_scatter_tensor(groups, dtype, op, async_op):
    rank, size = dist.get_rank(), dist.get_world_size()
    ours, gloo = both(groups, lambda g, out, src, async_op:
                      dist.reduce_scatter_tensor(out, src, op, g, async_op),
                      lambda: torch.empty(3, dtype=dtype),
                      lambda: rank_tensor(rank, (3 * size,), dtype), async_op=async_op)
    assert_same(ours[0], gloo[0])


@pytest.mark.parametrize("async_op", [False, True])
def test_reduce_scatter_list(groups, async_op):
    rank, size, (ours, gloo) = dist.get_rank(), dist.get_world_size(), groups
    inputs = [rank_tensor(rank, (r + 2,), torch.int64, seed=r) for r in range(size)]
    expected = torch.stack(everyone(gloo, torch.cat(inputs))).sum(0)
    offset = sum(r + 2 for r in range(rank))
    output = torch.empty(rank + 2, dtype=torch.int64)
    work = dist.reduce_scatter(output, inputs, group=ours, async_op=async_op)
    if async_op:
        work.wait()
    assert_same(output, expected[offset:offset + rank + 2])


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_all_to_all_single_even(groups, dtype, async_op):
    rank, size = dist.get_rank(), dist.get_world_size()
    ours, gloo = both(groups, lambda g, out, src, async_op:
                      dist.all_to_all_single(out, src, group=g, async_op=async_op),
                      lambda: torch.empty(2 * size, 3, dtype=dtype),
                      lambda: rank_tensor(rank, (2 * size, 3), dtype), async_op=async_op)
    assert_same(ours[0], gloo[0])


def test_all_to_all_single_with_splits(groups):
    rank, size = dist.get_rank(), dist.get_world_size()
    # rank r sends (r + d + 1) rows to rank d: torch's documented uneven example, in shape
    send_splits = [rank + d + 1 for d in range(size)]
    recv_splits = [s + rank + 1 for s in range(size)]
    ours, gloo = both(groups, lambda g, out, src, async_op: dist.all_to_all_single(
                          out, src, recv_splits, send_splits, group=g, async_op=async_op),
                      lambda: torch.empty(sum(recv_splits), 2),
                      lambda: rank_tensor(rank, (sum(send_splits), 2)))
    assert_same(ours[0], gloo[0])


def test_all_to_all_list(groups):
    rank, size, (ours, gloo) = dist.get_rank(), dist.get_world_size(), groups
    inputs = [torch.full((rank + d + 1,), float(100 * rank + d)) for d in range(size)]
    outputs = [torch.empty(s + rank + 1) for s in range(size)]
    dist.all_to_all(outputs, inputs, group=ours)
    assert_same(outputs, [torch.full((s + rank + 1,), float(100 * s + rank))
                          for s in range(size)])


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("op", [Op.SUM, Op.MIN])
def test_reduce_to_every_root(groups, op, async_op):
    rank = dist.get_rank()
    for root in range(dist.get_world_size()):
        ours, gloo = both(groups, lambda g, t, async_op: dist.reduce(t, root, op, g, async_op),
                          lambda: rank_tensor(rank, (5,), torch.int64, seed=root),
                          async_op=async_op)
        if rank == root:
            assert_same(ours, gloo)
        else:
            assert_same(ours, [rank_tensor(rank, (5,), torch.int64, seed=root)])


@pytest.mark.parametrize("async_op", [False, True])
def test_gather_and_scatter(groups, async_op):
    rank, size = dist.get_rank(), dist.get_world_size()
    for root in range(size):
        def gather(group, source, async_op):
            out = [torch.empty(4) for _ in range(size)] if rank == root else None
            work = dist.gather(source, out, root, group, async_op)
            if async_op:
                work.wait()
            return out or []

        def scatter(group, async_op):
            out = torch.empty(3)
            pieces = [rank_tensor(r, (3,), seed=7) for r in range(size)] if rank == root \
                else None
            work = dist.scatter(out, pieces, root, group, async_op)
            if async_op:
                work.wait()
            return out
        assert_same(*[gather(g, rank_tensor(rank, (4,)), async_op) for g in groups])
        assert_same(*[scatter(g, async_op) for g in groups])


def test_send_recv_ring(groups):
    rank, size, (ours, _) = dist.get_rank(), dist.get_world_size(), groups
    if size == 1:
        pytest.skip("a ring needs two ranks")
    received = torch.empty(6, dtype=torch.int64)
    sending = dist.isend(torch.arange(6) + rank, (rank + 1) % size, ours)
    dist.recv(received, (rank - 1) % size, ours)
    sending.wait()
    assert_same(received, torch.arange(6) + (rank - 1) % size)


def test_batch_isend_irecv(groups):
    rank, size, (ours, _) = dist.get_rank(), dist.get_world_size(), groups
    received = torch.empty(3)
    ops = [dist.P2POp(dist.isend, torch.full((3,), float(rank)), (rank + 1) % size, ours),
           dist.P2POp(dist.irecv, received, (rank - 1) % size, ours)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert_same(received, torch.full((3,), float((rank - 1) % size)))


def test_barrier_and_object_collectives(groups):
    rank, size, (ours, _) = dist.get_rank(), dist.get_world_size(), groups
    dist.barrier(ours)
    objects = [None] * size
    dist.all_gather_object(objects, {"rank": rank}, group=ours)
    assert objects == [{"rank": r} for r in range(size)]
    box = [f"from {rank}"]
    dist.broadcast_object_list(box, src=size - 1, group=ours)
    assert box == [f"from {size - 1}"]


def test_all_reduce_coalesced(groups):
    rank, (ours, gloo) = dist.get_rank(), groups
    tensors = [rank_tensor(rank, (n,), seed=n) for n in (1, 5, 9)]
    expected = [torch.stack(everyone(gloo, t)).sum(0) for t in tensors]
    with pytest.warns(FutureWarning):
        dist.all_reduce_coalesced(tensors, group=ours)
    assert_same(tensors, expected)


def test_new_group_of_even_ranks(groups):
    rank, size = dist.get_rank(), dist.get_world_size()
    members = list(range(0, size, 2))
    sub = dist.new_group(members, backend="aluminum")
    if rank not in members:
        assert sub == dist.GroupMember.NON_GROUP_MEMBER
        return
    tensor = torch.tensor([float(rank)])
    dist.all_reduce(tensor, group=sub)
    assert tensor.item() == float(sum(members))
    assert dist.get_rank(sub) == members.index(rank)


def test_mismatched_sizes_raise_with_al_debug(groups, monkeypatch):
    rank, size, (ours, _) = dist.get_rank(), dist.get_world_size(), groups
    if size == 1:
        pytest.skip("a mismatch needs two ranks")
    from aluminum import debug, recall   # the switch AL_DEBUG=1 sets at import
    monkeypatch.setattr(debug, "ENABLED", True)
    # AL_DEBUG is agreed at al.init(); switched on mid-run, the calls of kinds kept before
    # (new float32 tensors of 4 elements: earlier tests') would still skip the check.
    recall.forget()
    with pytest.raises(al.ArgumentError, match="ranks issued different collectives"):
        dist.all_reduce(torch.ones(4 + rank), group=ours)


def test_bad_tensors_raise_before_communicating(groups):
    ours, _ = groups
    with pytest.raises(altorch.TensorError, match="contiguous"):
        dist.all_reduce(torch.ones(4, 4).t(), group=ours)
    with pytest.raises(altorch.TensorError, match="meta"):
        dist.broadcast(torch.empty(3, device="meta"), 0, group=ours)
    dist.barrier(ours)      # the group is still usable, nothing left half-issued
