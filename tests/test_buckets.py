"""al.GradientBucket and its rules (aluminum/buckets.py), in one process: which tensors share
a bucket (size caps, keys), views that alias the bucket's memory, and when memory is shared.
Training through them on several ranks: tests/mpi/rank_executor_*.py, rank_torch_ddp.py."""
from types import SimpleNamespace

import numpy as np
import pytest

import aluminum as al

KIB = 1024 / 2 ** 20        # one KiB in MiB


@pytest.fixture(scope="module")
def comm():
    with al.MPICommunicator() as communicator:
        yield communicator


@pytest.mark.parametrize("nbytes, keys, cap, first, expected", [
    ([512, 512, 512], None, 1, 1, [[0, 1], [2]]),             # fills up to the cap exactly
    ([512, 513, 100], None, 1, 1, [[0], [1, 2]]),             # 1025 B would overflow
    ([100, 100, 300, 300], None, 1, 0.25, [[0, 1], [2, 3]]),  # a small first bucket
    ([4096, 8, 8], None, 1, 1, [[0], [1, 2]]),                # too big: alone
    ([8, 8, 8, 8], ["f4", "f8", "f4", "f8"], 1, 1, [[0, 2], [1, 3]]),   # one open per key
    ([600, 8, 600, 8], ["a", "b", "a", "b"], 1, 1, [[0], [1, 3], [2]]),
], ids=["cap", "overflow", "first", "large", "keys", "keys-cap"])
def test_assignment_follows_caps_and_keys(nbytes, keys, cap, first, expected):
    assert al.assign_buckets(nbytes, keys, cap * KIB, first * KIB) == expected


def test_random_assignments_keep_the_rule():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        nbytes = rng.integers(1, 3000, n).tolist()
        keys = rng.integers(0, 3, n).tolist()
        buckets = al.assign_buckets(nbytes, keys, 2 * KIB, 1 * KIB)
        assert sorted(i for bucket in buckets for i in bucket) == list(range(n))
        assert [bucket[0] for bucket in buckets] == sorted(bucket[0] for bucket in buckets)
        for number, bucket in enumerate(buckets):
            cap = 1024 if number == 0 else 2048
            assert bucket == sorted(bucket) and len({keys[i] for i in bucket}) == 1
            assert len(bucket) == 1 or sum(nbytes[i] for i in bucket) <= cap
            # closed only for a tensor of its key that would have overflowed it
            later = [i for i in range(bucket[-1] + 1, n) if keys[i] == keys[bucket[0]]]
            if later:
                assert sum(nbytes[i] for i in bucket) + nbytes[later[0]] > cap


def test_bad_assignment_arguments_are_named():
    with pytest.raises(al.ArgumentError, match="keys: expected one per tensor"):
        al.assign_buckets([1, 2], ["a"])
    with pytest.raises(al.ArgumentError, match="bucket_cap_mb: expected a positive"):
        al.assign_buckets([1], bucket_cap_mb=0)


def test_views_alias_the_memory_in_order_then_the_extra_elements(comm):
    rng = np.random.default_rng(1)
    values = [rng.normal(size=shape) for shape in [(2, 3), (4,), ()]]
    bucket = al.GradientBucket([v.shape for v in values], np.float64, comm, extra=2)
    assert bucket.memory.shape == (6 + 4 + 1 + 2,)
    for view, value in zip(bucket.views, values):
        assert view.shape == value.shape and np.shares_memory(view, bucket.memory)
        view[...] = value
    bucket.tail[...] = (5, 7)
    np.testing.assert_array_equal(bucket.memory,
                                  np.concatenate([v.ravel() for v in values] + [[5, 7]]))
    np.testing.assert_array_equal(bucket.tensors, bucket.memory[:-2])
    bucket.start()
    bucket.wait()                                  # a sum over one rank: unchanged
    np.testing.assert_array_equal(bucket.views[0], values[0])
    bucket.memory[:6] = 0
    assert not bucket.views[0].any()               # and back: the views see the memory
    bucket.reshape_views([(3, 2), (2, 2), (1,)])
    np.testing.assert_array_equal(bucket.views[1], values[1].reshape(2, 2))
    with pytest.raises(al.ArgumentError, match="shapes: expected 11 elements"):
        bucket.reshape_views([(12,)])
    bucket.free()


def test_an_averaging_reduce_to_a_root(comm):
    bucket = al.GradientBucket([(3,)], np.float32, comm, op=al.AVG, root=0)
    bucket.views[0][...] = [1, 2, 3]
    bucket.run()
    np.testing.assert_array_equal(bucket.views[0], [1, 2, 3])
    bucket.free()


def test_given_memory_is_used_and_checked(comm):
    memory = np.zeros(5, np.float32)
    bucket = al.GradientBucket([(2,), (3,)], None, comm, memory=memory)
    assert bucket.memory is memory and np.shares_memory(bucket.views[1], memory)
    bucket.free()
    with pytest.raises(al.ArgumentError, match="memory: expected a flat array of 5"):
        al.GradientBucket([(2,), (3,)], None, comm, memory=np.zeros(6, np.float32))


def _comm(size, local_size, shares=True):
    backend = SimpleNamespace(allocate_shared=(lambda c, n: None) if shares else None)
    return SimpleNamespace(backend=backend, size=size, local_size=local_size)


@pytest.mark.parametrize("size, local_size, backend_shares, shared", [
    (2, 2, True, True), (4, 4, True, True),
    (1, 1, True, False),          # one rank: nothing to share
    (4, 2, True, True),           # two nodes of two: a segment per node
    (2, 1, True, False),          # two nodes of one: nothing to share on either
    (2, 2, False, False),         # a backend without shared host memory (NCCL, ...)
])
def test_memory_is_shared_by_the_ranks_of_a_node(size, local_size, backend_shares, shared):
    assert al.shares_memory(_comm(size, local_size, backend_shares)) is shared


def test_private_memory_where_it_is_not_shared(comm):
    memory = al.bucket_memory(4, np.float32, comm, provisional=comm.size > 1)
    assert memory.shape == (4,) and memory.dtype == np.float32 and memory.flags.owndata
