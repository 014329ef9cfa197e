"""aluminum.torch.DistributedDataParallel in one process (one rank): bucketing, gradient
views, the end-of-backward wait, hooks and errors.  Multi-rank equivalence with torch DDP and
single-process training is in tests/mpi/rank_torch_ddp.py."""
import pytest

torch = pytest.importorskip("torch")

import aluminum as al  # noqa: E402
import aluminum.torch as altorch  # noqa: E402
from aluminum.torch import comm_hooks  # noqa: E402


@pytest.fixture(scope="module")
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def inside_a_bucket(grad, ddp) -> bool:
    """True if ``grad``'s memory lies within one of ``ddp``'s bucket buffers."""
    start, end = grad.data_ptr(), grad.data_ptr() + grad.numel() * grad.element_size()
    for bucket in ddp.buckets():
        buffer = bucket.buffer()
        low = buffer.data_ptr()
        if low <= start and end <= low + buffer.numel() * buffer.element_size():
            return True
    return False


def test_first_buckets_follow_reverse_parameter_order_and_caps(comm):
    # sizes in reverse order: 16 B, 1024 B, 256 B, 16 KiB; caps of 1153 B
    ddp = altorch.DistributedDataParallel(mlp(), comm, bucket_cap_mb=0.0011,
                                          first_bucket_mb=0.0011)
    params = list(ddp.module.parameters())
    layout = [[next(i for i, q in enumerate(params) if q is p) for p in b.parameters()] for b in ddp.buckets()]
    assert layout == [[3, 2], [1], [0]]   # each closes before a gradient would overflow it
    ddp.close()


def test_gradients_are_bucket_views_and_equal_plain_backward(comm):
    model, plain = mlp(), mlp()
    ddp = altorch.DistributedDataParallel(model, comm)
    x = torch.randn(5, 64)
    for _ in range(2):                     # the second iteration runs on rebuilt buckets
        model.zero_grad(set_to_none=True)
        plain.zero_grad()
        ddp(x).square().sum().backward()
        plain(x).square().sum().backward()
    for p, q in zip(model.parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
        assert inside_a_bucket(p.grad, ddp)
    ddp.close()
    assert all(p.grad is not None for p in model.parameters())   # private copies remain


def test_comm_hook_registers_once(comm):
    ddp = altorch.DistributedDataParallel(mlp(), comm)
    ddp.register_comm_hook(None, comm_hooks.bf16_compress_hook)
    with pytest.raises(al.ArgumentError, match="only once"):
        ddp.register_comm_hook(None, comm_hooks.fp16_compress_hook)
    ddp.close()


def test_integer_parameters_are_refused(comm):
    module = torch.nn.Linear(2, 2)
    module.weight = torch.nn.Parameter(torch.ones(2, 2, dtype=torch.int64), requires_grad=False)
    module.extra = torch.nn.Parameter(torch.ones(2, dtype=torch.float64).to(torch.int32),
                                      requires_grad=False)
    altorch.DistributedDataParallel(module, comm).close()       # frozen: ignored
    module.bad = torch.nn.Parameter(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(altorch.TensorError, match="bad: expected a float32/64"):
        altorch.DistributedDataParallel(module, comm)


def test_unused_parameter_error_names_it(comm):
    model = mlp()
    ddp = altorch.DistributedDataParallel(model, comm)
    with pytest.raises(altorch.ReductionIncompleteError, match=r"0\.weight, 0\.bias"):
        model[2](torch.ones(1, 64)).sum().backward()       # skips layer 0 entirely
    ddp.close()
