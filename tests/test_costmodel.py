"""Tests of the α-β cost model against hand-computed times, winners, crossovers and fits."""

import random

import pytest

from aluminum.tuning import costmodel
from aluminum.core.errors import ArgumentError

A, B = 1e-6, 1e-9  # α = 1 µs, β = 1 ns/byte (1 GB/s)
N = 1000  # bytes: n·β = 1 µs


# Expected values worked out by hand from the formulas in costmodel's docstring.
@pytest.mark.parametrize("op, algo, p, expected", [
    # ring: 2(p−1)α + 2((p−1)/p)nβ = 6 µs + 1.5 µs
    ("allreduce", "ring", 4, 7.5e-6),
    # recursive doubling: log2(4)(α + nβ) = 2 · 2 µs
    ("allreduce", "recursive_doubling", 4, 4e-6),
    # Rabenseifner: 2·log2(4)·α + 2(3/4)nβ = 4 µs + 1.5 µs
    ("allreduce", "rabenseifner", 4, 5.5e-6),
    # passthrough: min(recursive doubling 4 µs, ring 7.5 µs)
    ("allreduce", "mpi_passthrough", 4, 4e-6),
    # shared memory: 2·sync + 3n·copy_beta with sync = α, copy_beta = β/2 → 2 µs + 1.5 µs
    ("allreduce", "shared_memory", 4, 3.5e-6),
    # p = 3: ring 2·2·α + 2(2/3)nβ = 4 µs + 4/3 µs
    ("allreduce", "ring", 3, 4e-6 + 4e-6 / 3),
    # p = 3 folds to p' = 2: 1·(α + nβ) + pre/post 2(α + nβ) = 2 µs + 4 µs
    ("allreduce", "recursive_doubling", 3, 6e-6),
    # p = 3: 2·1·α + 2(1/2)nβ + 2(α + nβ) = 2 + 1 + 4 µs
    ("allreduce", "rabenseifner", 3, 7e-6),
    # p = 6 folds to p' = 4: 2 steps (not ceil(log2 6) = 3) · 2 µs + 4 µs
    ("allreduce", "recursive_doubling", 6, 8e-6),
    # reduce_scatter ring: (p−1)α + ((p−1)/p)nβ = 3 µs + 0.75 µs
    ("reduce_scatter", "ring", 4, 3.75e-6),
    # recursive halving: log2(4)α + (3/4)nβ = 2 µs + 0.75 µs
    ("reduce_scatter", "recursive_halving", 4, 2.75e-6),
    # p = 3: 1·α + (1/2)nβ + fold 2α + (1 + 1/3)nβ = 1.5 µs + (2 + 4/3) µs
    ("reduce_scatter", "recursive_halving", 3, 1.5e-6 + 2e-6 + 4e-6 / 3),
    ("allgather", "ring", 4, 3.75e-6),
    ("allgather", "recursive_doubling", 4, 2.75e-6),
    ("allgather", "mpi_passthrough", 4, 2.75e-6),
])
def test_predict_matches_hand_computed(op, algo, p, expected):
    assert costmodel.predict(op, algo, p, N, A, B) == pytest.approx(expected, rel=1e-12)


def test_shared_memory_parameters_override_defaults():
    shm = costmodel.SharedMemoryCost(sync=5e-7, copy_beta=2e-10)
    # 2 · 0.5 µs + 3 · 1000 · 0.2 ns = 1 µs + 0.6 µs
    got = costmodel.predict("allreduce", "shared_memory", 4, N, A, B, shm=shm)
    assert got == pytest.approx(1.6e-6, rel=1e-12)


@pytest.mark.parametrize("op", ["allreduce", "reduce_scatter", "allgather"])
def test_one_rank_costs_nothing(op):
    for algo in costmodel.algorithms(op):
        assert costmodel.predict(op, algo, 1, 10**6, A, B) == 0.0


def test_zero_bytes_costs_latency_only():
    assert costmodel.predict("allreduce", "ring", 4, 0, A, B) == pytest.approx(6e-6)


@pytest.mark.parametrize("kwargs, name", [
    ({"op": "alltoall"}, "op"), ({"algo": "biring"}, "algo"), ({"p": 0}, "p"),
    ({"p": True}, "p"), ({"nbytes": -1}, "nbytes"), ({"alpha": float("nan")}, "alpha"),
    ({"beta": -1e-9}, "beta"),
])
def test_predict_rejects_bad_arguments(kwargs, name):
    args = {"op": "allreduce", "algo": "ring", "p": 4, "nbytes": N, "alpha": A, "beta": B}
    with pytest.raises(ArgumentError, match=f"^{name}:"):
        costmodel.predict(**{**args, **kwargs})


def test_best_small_and_large():
    three = ["ring", "recursive_doubling", "rabenseifner"]
    assert costmodel.best("allreduce", 4, 0, A, B, three) == "recursive_doubling"
    # 1 MB: RD 2 µs + 2 ms, Rabenseifner 4 µs + 1.5 ms, ring 6 µs + 1.5 ms
    assert costmodel.best("allreduce", 4, 10**6, A, B, three) == "rabenseifner"


def test_best_breaks_ties_in_model_order():
    # passthrough equals recursive doubling here and comes first in algorithms()
    assert costmodel.best("allreduce", 4, 0, A, B, ["recursive_doubling", "mpi_passthrough"]) \
        == "mpi_passthrough"
    assert costmodel.best("allreduce", 1, 0, A, B) == costmodel.algorithms("allreduce")[0]


@pytest.mark.parametrize("candidates", [[], ["ring", "nccl_native"]])
def test_best_rejects_unknown_or_empty_candidates(candidates):
    with pytest.raises(ArgumentError, match="candidates"):
        costmodel.best("allreduce", 4, N, A, B, candidates)


def test_crossovers_recursive_doubling_to_rabenseifner():
    # 2α + 2nβ = 4α + 1.5nβ at n = 4α/β = 4000 bytes
    sizes = [10**6, 0, 1000, 3000, 5000, 8000]
    got = costmodel.crossovers("allreduce", 4, A, B,
                               ["recursive_doubling", "rabenseifner"], sizes)
    assert got == [(5000, "rabenseifner")]


def test_crossovers_none_when_one_algorithm_always_wins():
    assert costmodel.crossovers("allreduce", 2, A, B, ["recursive_doubling", "ring"],
                                [0, 10, 10**6]) == []


def test_algorithms_lists_modelled_ops():
    assert set(costmodel.algorithms("allreduce")) == {
        "mpi_passthrough", "recursive_doubling", "ring", "rabenseifner", "shared_memory"}
    assert costmodel.algorithms("alltoall") == ()


@pytest.mark.parametrize("p, rounds", [(2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4)])
def test_barrier_is_rounds_of_empty_messages_against_cache_lines_read(p, rounds):
    # MPI's dissemination barrier: ceil(log2 p) rounds of one empty message; the arrival
    # board's: the p - 1 other ranks' counts read, a 64-byte line each, at beta / 2
    assert costmodel.predict("barrier", "mpi_passthrough", p, 0, A, B) == \
        pytest.approx(rounds * A)
    assert costmodel.predict("barrier", "shared_memory", p, 0, A, B) == \
        pytest.approx((p - 1) * 64 * B / 2)
    assert costmodel.best("barrier", p, 0, A, B) == "shared_memory"
    assert costmodel.best("barrier", p, 0, A, B, ["mpi_passthrough"]) == "mpi_passthrough"


def test_fit_recovers_exact_alpha_beta():
    sizes = [0, 1024, 65536, 1 << 20, 4 << 20]
    times = [3e-6 + n * 2e-10 for n in sizes]
    fit = costmodel.fit_alpha_beta(sizes, times)
    assert fit.alpha == pytest.approx(3e-6, rel=1e-6)
    assert fit.beta == pytest.approx(2e-10, rel=1e-9)


def test_fit_tolerates_noise():
    rng = random.Random(0)
    sizes = [2**k for k in range(24)] * 3
    times = [(3e-6 + n * 2e-10) * (1 + rng.uniform(-0.01, 0.01)) for n in sizes]
    alpha, beta = costmodel.fit_alpha_beta(sizes, times)
    assert beta == pytest.approx(2e-10, rel=0.02)
    assert alpha == pytest.approx(3e-6, abs=2e-6)


@pytest.mark.parametrize("sizes, times", [([8, 8], [1e-6, 1e-6]), ([8, 16], [1e-6])])
def test_fit_rejects_unusable_data(sizes, times):
    with pytest.raises(ArgumentError):
        costmodel.fit_alpha_beta(sizes, times)
