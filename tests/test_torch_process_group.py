"""The "aluminum" torch.distributed backend in one process (a one-rank job): registration,
argument checks, the async Work and its Future, and the environment the import leaves.

Multi-rank semantics against gloo live in tests/mpi/rank_torch_collectives.py."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import aluminum as al  # noqa: E402
import aluminum.torch as altorch  # noqa: E402
from torch_groups import PREMUL_READABLE, init_one_rank_group  # noqa: E402


@pytest.fixture(scope="module")
def group():
    """A one-rank default group on the "aluminum" backend (no launcher: explicit store)."""
    init_one_rank_group()
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_backend_is_registered_for_cpu_and_cuda():
    assert "aluminum" in dist.Backend.backend_list
    assert set(dist.Backend.backend_capability["aluminum"]) == {"cpu", "cuda"}
    assert dist.Backend.default_device_backend_map.get("cpu") != "aluminum"   # not forced


def test_default_group_is_the_aluminum_process_group(group):
    assert isinstance(group, altorch.ProcessGroupAluminum)
    assert dist.get_backend() == "aluminum"
    assert (dist.get_rank(), dist.get_world_size()) == (0, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_one_rank_allreduce_keeps_values(group, dtype):
    tensor = torch.arange(6, dtype=dtype)
    dist.all_reduce(tensor)
    assert torch.equal(tensor, torch.arange(6, dtype=dtype))


def test_async_work_future_holds_the_outputs(group):
    tensor = torch.full((5,), 3.0)
    work = dist.all_reduce(tensor, op=dist.ReduceOp.AVG, async_op=True)
    assert isinstance(work, altorch.AluminumWork)
    assert work.wait() is True
    assert work.is_completed() and work.is_success() and work.exception() is None
    (result,) = work.get_future().value()
    assert result is tensor and torch.equal(tensor, torch.full((5,), 3.0))


def test_future_then_runs_after_the_copy_out(group):
    outputs = [torch.zeros(3)]
    work = dist.all_gather(outputs, torch.arange(3.0), async_op=True)
    seen = work.get_future().then(lambda fut: fut.value()[0][0].clone()).wait()
    assert torch.equal(seen, torch.arange(3.0))


def test_premul_sum_scales_before_summing(group):
    tensor = torch.arange(4.0)
    if not PREMUL_READABLE:   # an older torch: a clear refusal, the tensor untouched
        with pytest.raises(al.UnsupportedError, match="PREMUL_SUM's factor"):
            dist.all_reduce(tensor, op=dist._make_nccl_premul_sum(2.5))
        assert torch.equal(tensor, torch.arange(4.0))
        return
    dist.all_reduce(tensor, op=dist._make_nccl_premul_sum(2.5))
    assert torch.equal(tensor, torch.arange(4.0) * 2.5)


def test_bool_sum_is_logical_or(group):
    tensor = torch.tensor([True, False])
    dist.all_reduce(tensor)
    assert tensor.tolist() == [True, False]


def test_avg_on_bool_is_refused(group):
    with pytest.raises(al.UnsupportedError, match="AVG"):
        dist.all_reduce(torch.tensor([True]), op=dist.ReduceOp.AVG)


def test_non_contiguous_tensor_names_the_argument(group):
    tensor = torch.zeros(4, 4).t()
    with pytest.raises(altorch.TensorError, match=r"tensor: expected a contiguous tensor"):
        dist.all_reduce(tensor)
    with pytest.raises(ValueError):                 # what torch users catch
        dist.broadcast(tensor, 0)


def test_wrong_device_names_the_device(group):
    with pytest.raises(altorch.TensorError, match="CPU or CUDA tensor.*meta"):
        dist.all_reduce(torch.empty(4, device="meta"))


def test_sparse_tensor_is_refused(group):
    with pytest.raises(altorch.TensorError, match="dense"):
        dist.all_reduce(torch.eye(3).to_sparse())


def test_wrong_list_length_is_refused(group):
    with pytest.raises(altorch.TensorError, match="expected 1 tensors"):
        dist.all_gather([torch.zeros(2), torch.zeros(2)], torch.zeros(2))


def test_tagged_send_is_refused(group):
    with pytest.raises(al.UnsupportedError, match="tag"):
        dist.isend(torch.zeros(1), 0, tag=3)


def test_invalid_rank_list_is_refused(group):
    with pytest.raises((ValueError, al.AluminumError)):
        dist.new_group([0, 7])


def test_errors_derive_from_aluminum_error():
    for error in (altorch.TensorError, altorch.GroupError, altorch.ReductionIncompleteError):
        assert issubclass(error, al.AluminumError)


def test_import_outside_a_launcher_leaves_the_environment_alone():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "MASTER_", "RANK", "WORLD_SIZE"))}
    code = ("import os, aluminum.torch; "
            "print([k for k in ('MASTER_ADDR', 'MASTER_PORT', 'RANK', 'WORLD_SIZE') "
            "if k in os.environ])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cuda_tensors_go_to_nccl_unless_ranks_share_a_gpu():
    from aluminum.torch import devices

    assert devices.backend_for([(0, 11), (0, 12), (1, 11), (1, 12)]) == "nccl"
    assert devices.backend_for([(0, 11), (0, 11)]) == "ht"        # two ranks, one GPU
    assert devices.backend_for([(0, 11), (0, 12)], "ht") == "ht"  # forced
    assert devices.backend_for([(0, 11), (0, 11)], "nccl") == "nccl"


def test_cuda_backend_setting_is_checked(monkeypatch):
    from aluminum.torch import devices

    monkeypatch.setenv("AL_TORCH_CUDA_BACKEND", "NCCL ")
    assert devices.chosen_backend() == "nccl"
    monkeypatch.setenv("AL_TORCH_CUDA_BACKEND", "gloo")
    with pytest.raises(al.ArgumentError, match="AL_TORCH_CUDA_BACKEND.*auto, nccl, ht.*gloo"):
        devices.chosen_backend()
