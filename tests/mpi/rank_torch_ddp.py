"""Data parallelism equals single-process training: after K steps the parameters under torch
DDP over gloo, torch DDP over "aluminum" and aluminum.torch.DistributedDataParallel equal a
model trained in this process on the whole global batch (float32, rtol 1e-5); no_sync
accumulation equals one step on the concatenated batch; unused parameters and comm hooks."""
import copy

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as TorchDDP  # noqa: E402

import aluminum.torch as altorch  # noqa: E402
from aluminum.torch import comm_hooks  # noqa: E402

STEPS, PER_RANK = 3, 4


@pytest.fixture(scope="module")
def groups():
    dist.init_process_group("aluminum")
    gloo = dist.new_group(backend="gloo")
    yield dist.group.WORLD, gloo
    dist.destroy_process_group()


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 3))


def batches(size, steps=STEPS, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(PER_RANK * size, 10, generator=generator),
             torch.randn(PER_RANK * size, 3, generator=generator)) for _ in range(steps)]


def train(model, data, shard):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for inputs, targets in data:
        optimizer.zero_grad()
        x, y = shard(inputs), shard(targets)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def reference(data, seed=0):
    model = make_model(seed)
    train(model, data, lambda t: t)
    return model


def my_shard(t):
    rank = dist.get_rank()
    return t[rank * PER_RANK:(rank + 1) * PER_RANK]


def assert_params_equal(model, expected):
    for (name, p), q in zip(model.named_parameters(), expected.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


def wrapped(setup, groups, model, **options):
    ours, gloo = groups
    if setup == "gloo-ddp":
        return TorchDDP(model, process_group=gloo, **options)
    if setup == "aluminum-ddp":
        return TorchDDP(model, process_group=ours, **options)
    return altorch.DistributedDataParallel(model, ours.comm, bucket_cap_mb=0.004,
                                           first_bucket_mb=0.001, **options)


@pytest.mark.parametrize("setup", ["gloo-ddp", "aluminum-ddp", "aluminum-dp"])
def test_k_steps_equal_single_process_training(groups, setup):
    data = batches(dist.get_world_size())
    torch.manual_seed(100 + dist.get_rank())          # different start: the wrap syncs it
    model = make_model(seed=100 + dist.get_rank())
    train(wrapped(setup, groups, model), data, my_shard)
    assert_params_equal(model, reference(data, seed=100))     # rank 0's start


def test_buckets_are_rebuilt_in_ready_order_and_shared(groups):
    model = make_model()
    ddp = wrapped("aluminum-dp", groups, model)
    params = list(model.parameters())

    def layout():
        return [next(i for i, q in enumerate(params) if q is p) for bucket in ddp.buckets() for p in bucket.parameters()]
    first = layout()
    train(ddp, batches(dist.get_world_size()), my_shard)
    after = layout()
    assert sorted(after) == list(range(len(params)))
    assert first == list(reversed(range(len(after))))
    for p in params:                    # every gradient still inside its bucket
        start = p.grad.data_ptr()
        assert any(b.buffer().data_ptr() <= start and start + p.grad.numel() * 4 <=
                   b.buffer().data_ptr() + b.buffer().numel() * 4 for b in ddp.buckets())
    ddp.close()


@pytest.mark.parametrize("setup", ["aluminum-ddp", "aluminum-dp"])
def test_no_sync_accumulation_equals_one_step_on_the_concatenated_batch(groups, setup):
    size, micro = dist.get_world_size(), 3
    (inputs, targets), = batches(size * micro, steps=1, seed=4)
    model = make_model()
    ddp = wrapped(setup, groups, model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.zero_grad()
    rank = dist.get_rank()
    for m in range(micro):               # this rank's rows, in `micro` pieces
        rows = slice((rank * micro + m) * PER_RANK, (rank * micro + m + 1) * PER_RANK)
        loss = torch.nn.functional.mse_loss(ddp(inputs[rows]), targets[rows]) / micro
        if m < micro - 1:
            with ddp.no_sync():
                loss.backward()
        else:
            loss.backward()
    optimizer.step()
    assert_params_equal(model, _sgd_once(inputs, targets))


def _sgd_once(inputs, targets):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
    return model


class Branchy(torch.nn.Module):
    """``unused`` gets no gradient on odd ranks only (or nowhere, with ``everywhere``)."""

    def __init__(self, everywhere=False):
        super().__init__()
        torch.manual_seed(0)
        self.used, self.unused = torch.nn.Linear(6, 2), torch.nn.Linear(6, 2)
        self.everywhere = everywhere

    def forward(self, x):
        if self.everywhere or dist.get_rank() % 2:
            return self.used(x)
        return self.used(x) + self.unused(x)


def test_find_unused_parameters_averages_with_zeros(groups):
    model = Branchy()
    ddp = altorch.DistributedDataParallel(model, groups[0].comm, find_unused_parameters=True)
    x = torch.ones(3, 6)
    ddp(x).sum().backward()
    users = sum(1 for r in range(dist.get_world_size()) if r % 2 == 0)
    expected = torch.full((2, 6), 3.0 * users / dist.get_world_size())
    torch.testing.assert_close(model.unused.weight.grad, expected)
    ddp.close()


def test_unused_parameter_without_the_option_names_it(groups):
    model = Branchy(everywhere=True)
    ddp = altorch.DistributedDataParallel(model, groups[0].comm)
    with pytest.raises(altorch.ReductionIncompleteError, match="unused.weight, unused.bias"):
        ddp(torch.ones(3, 6)).sum().backward()
    ddp.close()


@pytest.mark.parametrize("hook,tol", [(comm_hooks.allreduce_avg_hook, 1e-6),
                                      (comm_hooks.fp16_compress_hook, 1e-3),
                                      (comm_hooks.bf16_compress_hook, 1e-2)])
def test_comm_hooks_average_the_gradients(groups, hook, tol):
    rank, size, (ours, gloo) = dist.get_rank(), dist.get_world_size(), groups
    model = make_model()
    ddp = altorch.DistributedDataParallel(model, ours.comm, bucket_cap_mb=0.004,
                                          first_bucket_mb=0.001)
    ddp.register_comm_hook(None, hook)
    (inputs, targets), = batches(size, steps=1)
    torch.nn.functional.mse_loss(ddp(my_shard(inputs)), my_shard(targets)).backward()
    plain = make_model()
    torch.nn.functional.mse_loss(plain(inputs), targets).backward()
    for p, q in zip(model.parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=tol, atol=tol)
    ddp.close()
