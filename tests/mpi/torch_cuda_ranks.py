"""The "aluminum" torch backend on CUDA tensors across ranks that share one GPU (the
host-transfer path), against numpy; launched by tests/test_torch_cuda.py on a GPU machine.

Covers the collectives' results, stream ordering with a slow producer on a side stream, and
``aluminum.torch.DistributedDataParallel`` with CUDA buckets equal to single-process
training on the global batch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import aluminum.torch as altorch  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no GPU", allow_module_level=True)

N = 1000


@pytest.fixture(scope="module")
def group():
    torch.cuda.set_device(0)
    dist.init_process_group("aluminum")
    yield dist.group.WORLD
    dist.destroy_process_group()


def rank_values(rank, dtype=np.float32):
    return ((np.arange(N) * (rank + 1)) % 11).astype(dtype)


def cuda(array):
    return torch.from_numpy(np.ascontiguousarray(array)).cuda()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", ["SUM", "MAX", "MIN", "AVG"])
def test_all_reduce_against_numpy(group, dtype, op):
    size, rank = dist.get_world_size(), dist.get_rank()
    every = np.stack([rank_values(r, dtype) for r in range(size)])
    expected = {"SUM": every.sum(0), "MAX": every.max(0), "MIN": every.min(0),
                "AVG": every.sum(0) / size if np.dtype(dtype).kind == "f"
                else np.trunc(every.sum(0) / size)}[op].astype(dtype)
    tensor = cuda(rank_values(rank, dtype))
    dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op))
    np.testing.assert_allclose(tensor.cpu().numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("async_op", [False, True])
def test_data_movement_against_numpy(group, async_op):
    size, rank = dist.get_world_size(), dist.get_rank()
    every = np.stack([rank_values(r) for r in range(size)])
    x = cuda(rank_values(rank))
    outputs = {"gathered": torch.empty(size * N, device="cuda"),
               "scattered": torch.empty(N // size if N % size == 0 else 0, device="cuda"),
               "swapped": torch.empty(N, device="cuda"), "bcast": x.clone()}
    works = [dist.all_gather_into_tensor(outputs["gathered"], x, async_op=async_op),
             dist.all_to_all_single(outputs["swapped"], x, async_op=async_op),
             dist.broadcast(outputs["bcast"], size - 1, async_op=async_op)]
    if N % size == 0:
        works.append(dist.reduce_scatter_tensor(outputs["scattered"], x, async_op=async_op))
    for work in works:
        if work is not None:
            work.wait()
    np.testing.assert_array_equal(outputs["gathered"].cpu().numpy(), every.reshape(-1))
    block = N // size
    np.testing.assert_array_equal(
        outputs["swapped"].cpu().numpy(),
        np.concatenate([every[r, rank * block:(rank + 1) * block] for r in range(size)]))
    np.testing.assert_array_equal(outputs["bcast"].cpu().numpy(), every[size - 1])
    if N % size == 0:
        np.testing.assert_array_equal(outputs["scattered"].cpu().numpy(),
                                      every.sum(0)[rank * block:(rank + 1) * block])


@pytest.mark.parametrize("async_op", [False, True])
def test_slow_producer_on_a_side_stream(group, async_op):
    size, rank = dist.get_world_size(), dist.get_rank()
    dist.all_reduce(torch.ones(1, device="cuda"))          # the GPU communicator exists
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tensor = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(int(1e8))
        tensor.fill_(rank + 1.0)
        work = dist.all_reduce(tensor, async_op=async_op)
        if work is not None:
            work.wait()
        result = tensor * 1
    side.synchronize()
    expected = size * (size + 1) / 2
    torch.testing.assert_close(result, torch.full_like(result, expected))


def test_ddp_cuda_buckets_equal_single_process_training(group):
    size, rank, per_rank, steps = dist.get_world_size(), dist.get_rank(), 4, 3

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(),
                                   torch.nn.Linear(32, 3)).cuda()

    generator = torch.Generator().manual_seed(1)
    data = [(torch.randn(per_rank * size, 10, generator=generator),
             torch.randn(per_rank * size, 3, generator=generator)) for _ in range(steps)]

    def train(net, params, rows):
        optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
        for inputs, targets in data:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(net(inputs[rows].cuda()), targets[rows].cuda())
            loss.backward()
            optimizer.step()

    model = make()
    ddp = altorch.DistributedDataParallel(model, group.comm, bucket_cap_mb=0.001,
                                          first_bucket_mb=0.0005)
    train(ddp, model.parameters(), slice(rank * per_rank, (rank + 1) * per_rank))
    reference = make()
    train(reference, reference.parameters(), slice(None))
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    ddp.close()
