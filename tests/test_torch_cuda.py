"""The "aluminum" torch backend on CUDA tensors (skipped without a GPU, with the reason).

One process: every collective against torch's own ``nccl`` backend on the same inputs, the
ordering on torch's current stream (a slow kernel ahead of the call must not be overtaken,
and the host must not wait for it), ``Work.wait()`` ordering the stream without blocking the
host, and ``aluminum.torch.DistributedDataParallel`` with CUDA buckets.  Two ranks sharing
the GPU (the host-transfer path) run tests/mpi/torch_cuda_ranks.py, launched from here.
"""
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402


def _why_skip():
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False: no GPU (or a CPU-only torch)"
    try:
        import cupy
    except ImportError:
        return "cupy is not installed (pip install -e '.[gpu]')"
    if not cupy.is_available():
        return "cupy.is_available() is False"
    return None


REASON = _why_skip()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

import aluminum.torch as altorch  # noqa: E402
from torch_groups import PREMUL_READABLE, init_one_rank_group  # noqa: E402

SLOW = int(2e8)        # torch.cuda._sleep cycles: ~0.1 s of one busy kernel ahead of a call


@pytest.fixture(scope="module")
def groups():
    """The default group on "aluminum" (one rank) and an ``nccl`` group beside it."""
    init_one_rank_group()
    nccl = dist.new_group(backend="nccl")
    yield dist.group.WORLD, nccl
    dist.destroy_process_group()


def both(groups, fn):
    """``fn(group)`` on the aluminum group and on the nccl group (fresh inputs each)."""
    ours, nccl = groups
    out = fn(ours), fn(nccl)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("op", ["SUM", "AVG", "MAX", "MIN", "PRODUCT", "PREMUL"])
def test_all_reduce_matches_nccl(groups, dtype, op):
    if op == "AVG" and dtype is torch.int64:
        pytest.skip("torch's nccl backend refuses AVG on integers")
    if op == "PREMUL" and not PREMUL_READABLE:
        pytest.skip(f"torch {torch.__version__} hides PREMUL_SUM's factor from Python")

    def run(group):
        tensor = (torch.arange(1, 1001, device="cuda") % 7).to(dtype)
        reduce_op = dist._make_nccl_premul_sum(2.0) if op == "PREMUL" else \
            getattr(dist.ReduceOp, op)
        if op == "PREMUL" and dtype is torch.int64:
            pytest.skip("PREMUL_SUM is for floating point")
        dist.all_reduce(tensor, op=reduce_op, group=group)
        return tensor
    ours, theirs = both(groups, run)
    assert ours.device.type == "cuda"
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_data_movement_matches_nccl(groups):
    def run(group):
        x = torch.arange(12, dtype=torch.float32, device="cuda") * 3
        bcast = x.clone()
        dist.broadcast(bcast, 0, group=group)
        gathered = torch.empty(12, device="cuda")
        dist.all_gather_into_tensor(gathered, x, group=group)
        listed = [torch.empty(12, device="cuda")]
        dist.all_gather(listed, x, group=group)
        scattered = torch.empty(12, device="cuda")
        dist.reduce_scatter_tensor(scattered, x, group=group)
        swapped = torch.empty(12, device="cuda")
        dist.all_to_all_single(swapped, x, group=group)
        reduced = x.clone()
        dist.reduce(reduced, 0, group=group)
        return bcast, gathered, listed[0], scattered, swapped, reduced
    for ours, theirs in zip(*both(groups, run)):
        assert ours.device.type == "cuda"
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def _slow_input(value: float, n: int = 1 << 20) -> torch.Tensor:
    """A tensor that the current stream fills with ``value`` only after a busy kernel."""
    tensor = torch.zeros(n, device="cuda")
    torch.cuda._sleep(SLOW)
    tensor.fill_(value)
    return tensor


@pytest.mark.parametrize("async_op", [False, True])
def test_calls_follow_the_current_stream_without_host_waits(groups, async_op):
    """An out-of-place collective (all_gather: into a staging tensor, then copied out) on a
    side stream whose input a busy kernel writes late: it must read the late value, write
    before the next kernel reads, and neither the call nor ``wait()`` may block the host."""
    ours, _ = groups
    dist.all_gather([torch.empty(1, device="cuda")], torch.ones(1, device="cuda"),
                    group=ours)                          # the GPU communicator exists
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tensor = _slow_input(3.0)
        gathered = [torch.zeros_like(tensor)]
        begin = time.perf_counter()
        work = dist.all_gather(gathered, tensor, group=ours, async_op=async_op)
        if work is not None:
            work.wait()
        returned = time.perf_counter() - begin
        pending = not side.query()           # the busy kernel still runs: nobody waited
        result = gathered[0] * 2              # ordered after the collective on this stream
    side.synchronize()
    assert pending, "the call (or Work.wait) blocked the host until the stream drained"
    assert returned < 0.05
    torch.testing.assert_close(result, torch.full_like(result, 6.0))


def test_async_work_future_and_completion(groups):
    ours, _ = groups
    tensor = _slow_input(5.0)
    work = dist.all_reduce(tensor, group=ours, async_op=True)
    assert not work.is_completed()            # the kernel ahead of it is still running
    (value,) = work.get_future().wait()
    assert value is tensor and work.is_completed() and work.is_success()
    torch.testing.assert_close(tensor, torch.full_like(tensor, 5.0))


def test_mixed_devices_are_refused_before_communicating(groups):
    ours, _ = groups
    with pytest.raises(altorch.TensorError, match="cuda"):
        dist.all_gather([torch.empty(3)], torch.ones(3, device="cuda"), group=ours)
    dist.all_reduce(torch.ones(3, device="cuda"), group=ours)   # still usable


def test_ddp_cuda_buckets_train_like_one_process(groups):
    ours, _ = groups
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4)).cuda()
    reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                    torch.nn.Linear(32, 4)).cuda()
    reference.load_state_dict(model.state_dict())
    ddp = altorch.DistributedDataParallel(model, ours.comm, bucket_cap_mb=0.001,
                                          first_bucket_mb=0.0005)
    generator = torch.Generator(device="cuda").manual_seed(1)
    for net in (ddp, reference):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        generator.manual_seed(1)
        for _ in range(3):
            x = torch.randn(8, 16, device="cuda", generator=generator)
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.grad.is_cuda
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    ddp.close()


def test_two_ranks_sharing_the_gpu(tmp_path):
    """tests/mpi/torch_cuda_ranks.py on 2 ranks: one GPU, so the host-transfer path."""
    from test_multirank import run_ranks

    run_ranks("torch_cuda_ranks.py", 2, tmp_path)
