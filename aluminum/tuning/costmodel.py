"""Predict collective-algorithm times with the α-β (latency-bandwidth) model.

A message of n bytes costs α + nβ. p is the number of ranks, n the size of the whole buffer
in bytes: the vector being reduced for allreduce and reduce_scatter, the gathered output for
allgather. Computation (the reduction itself) is not modelled; neither is contention.

Non-power-of-two p: the recursive algorithms first fold the p − p' extra ranks into partners
(p' = the largest power of two ≤ p), run on p' ranks, then send the result back. For
allreduce this pre/post step costs 2(α + nβ); for reduce_scatter and allgather one of the two
messages carries only one block, so 2α + (1 + 1/p)nβ. The core then runs on p' ranks, which
is why its step count is log2(p'), not ceil(log2 p).

``mpi_passthrough`` is modelled as the minimum of the recursive and ring variants: an
idealised MPI library that switches between its two classic algorithms at the right size.

``shared_memory`` (allreduce within one node) models: every rank copies its buffer into a
shared segment, a node barrier, each rank reduces its 1/p slice of all contributions, a
second barrier, every rank copies the result out. Time = 2·sync + 3n·copy_beta (copy in,
read the contributions of its slice, copy out). By default sync = α (a barrier costs about
one small-message latency) and copy_beta = β/2 (an intra-node MPI message is two memory
copies, into and out of the transport's shared buffer).

``barrier`` (n is 0): MPI's is a dissemination barrier, ceil(log2 p) rounds of one empty
message (α each); ``shared_memory`` sends no message: each rank stores its count on the
node's arrival board and reads the p − 1 others', a cache line each (``CACHE_LINE`` bytes at
copy_beta), so on one node it always wins in this model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple, Sequence

from ..core.errors import ArgumentError


@dataclass(frozen=True)
class SharedMemoryCost:
    """Parameters of the shared-memory allreduce model; None derives them from α and β."""

    sync: float | None = None
    copy_beta: float | None = None


class AlphaBeta(NamedTuple):
    """A fitted latency α (seconds) and per-byte time β (seconds per byte)."""

    alpha: float
    beta: float


_Formula = Callable[[int, float, float, float, SharedMemoryCost], float]


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def _is_pof2(p: int) -> bool:
    return p & (p - 1) == 0


def _allreduce_fold(p: int, n: float, a: float, b: float) -> float:
    return 0.0 if _is_pof2(p) else 2 * (a + n * b)


def _block_fold(p: int, n: float, a: float, b: float) -> float:
    return 0.0 if _is_pof2(p) else 2 * a + (1 + 1 / p) * n * b


def _allreduce_ring(p: int, n: float, a: float, b: float, shm: SharedMemoryCost) -> float:
    return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b


def _allreduce_recursive_doubling(p: int, n: float, a: float, b: float,
                                  shm: SharedMemoryCost) -> float:
    q = _pof2(p)
    return math.log2(q) * (a + n * b) + _allreduce_fold(p, n, a, b)


def _allreduce_rabenseifner(p: int, n: float, a: float, b: float,
                            shm: SharedMemoryCost) -> float:
    q = _pof2(p)
    return 2 * math.log2(q) * a + 2 * (q - 1) / q * n * b + _allreduce_fold(p, n, a, b)


def _allreduce_shared_memory(p: int, n: float, a: float, b: float,
                             shm: SharedMemoryCost) -> float:
    if p == 1:
        return 0.0
    sync = a if shm.sync is None else shm.sync
    copy_beta = b / 2 if shm.copy_beta is None else shm.copy_beta
    return 2 * sync + 3 * n * copy_beta


def _ring_half(p: int, n: float, a: float, b: float, shm: SharedMemoryCost) -> float:
    """Ring reduce_scatter or allgather: p − 1 steps, each moving one block of n/p bytes."""
    return (p - 1) * a + (p - 1) / p * n * b


def _recursive_half(p: int, n: float, a: float, b: float, shm: SharedMemoryCost) -> float:
    """Recursive halving reduce_scatter or recursive doubling allgather."""
    q = _pof2(p)
    return math.log2(q) * a + (q - 1) / q * n * b + _block_fold(p, n, a, b)


CACHE_LINE = 64   # bytes a core fetches to read another core's counter


def _barrier_dissemination(p: int, n: float, a: float, b: float,
                           shm: SharedMemoryCost) -> float:
    return math.ceil(math.log2(p)) * a


def _barrier_shared_memory(p: int, n: float, a: float, b: float,
                           shm: SharedMemoryCost) -> float:
    copy_beta = b / 2 if shm.copy_beta is None else shm.copy_beta
    return (p - 1) * CACHE_LINE * copy_beta


def _passthrough(*variants: _Formula) -> _Formula:
    def formula(p: int, n: float, a: float, b: float, shm: SharedMemoryCost) -> float:
        return min(f(p, n, a, b, shm) for f in variants)
    return formula


# Order matters: best() breaks ties in this order, and the library's own implementation comes
# first because it pays no Python per-step overhead that the model leaves out.
_MODELS: dict[str, dict[str, _Formula]] = {
    "allreduce": {
        "mpi_passthrough": _passthrough(_allreduce_recursive_doubling, _allreduce_ring),
        "recursive_doubling": _allreduce_recursive_doubling,
        "ring": _allreduce_ring,
        "rabenseifner": _allreduce_rabenseifner,
        "shared_memory": _allreduce_shared_memory,
    },
    "reduce_scatter": {
        "mpi_passthrough": _passthrough(_recursive_half, _ring_half),
        "recursive_halving": _recursive_half,
        "ring": _ring_half,
    },
    "allgather": {
        "mpi_passthrough": _passthrough(_recursive_half, _ring_half),
        "recursive_doubling": _recursive_half,
        "ring": _ring_half,
    },
    "barrier": {
        "mpi_passthrough": _barrier_dissemination,
        "shared_memory": _barrier_shared_memory,
    },
}


def algorithms(op: str) -> tuple[str, ...]:
    """Return the algorithms the model knows for `op`, in tie-breaking order (() if none)."""
    return tuple(_MODELS.get(op, ()))


def predict(op: str, algo: str, p: int, nbytes: float, alpha: float, beta: float, *,
            shm: SharedMemoryCost | None = None) -> float:
    """Return the predicted time in seconds of `algo` running `op` on p ranks over nbytes."""
    if op not in _MODELS:
        raise ArgumentError(f"op: expected one of {sorted(_MODELS)}, got {op!r}")
    if algo not in _MODELS[op]:
        raise ArgumentError(f"algo: expected one of {list(_MODELS[op])} for {op}, got {algo!r}")
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ArgumentError(f"p: expected an int >= 1, got {p!r}")
    for name, value in (("nbytes", nbytes), ("alpha", alpha), ("beta", beta)):
        if not value >= 0:
            raise ArgumentError(f"{name}: expected a number >= 0, got {value!r}")
    if p == 1:
        return 0.0
    return _MODELS[op][algo](p, float(nbytes), alpha, beta, shm or SharedMemoryCost())


def best(op: str, p: int, nbytes: float, alpha: float, beta: float,
         candidates: Iterable[str] | None = None, *,
         shm: SharedMemoryCost | None = None) -> str:
    """Return the candidate with the smallest predicted time; ties go to the earlier in
    algorithms(op). candidates=None means every algorithm the model knows for `op`."""
    order = algorithms(op)
    names = order if candidates is None else tuple(candidates)
    unknown = sorted(set(names) - set(order))
    if unknown or not names:
        raise ArgumentError(f"candidates: expected a non-empty subset of {list(order)} for "
                         f"{op!r}, got {list(names)!r}")
    return min(names, key=lambda a: (predict(op, a, p, nbytes, alpha, beta, shm=shm),
                                     order.index(a)))


def crossovers(op: str, p: int, alpha: float, beta: float,
               candidates: Iterable[str] | None, sizes: Sequence[int], *,
               shm: SharedMemoryCost | None = None) -> list[tuple[int, str]]:
    """Return (size, new winner) for each of the ascending `sizes` where the winner changes.

    The winner at the smallest size is not a change; ask best() for it."""
    names = None if candidates is None else tuple(candidates)
    changes: list[tuple[int, str]] = []
    previous: str | None = None
    for size in sorted(sizes):
        winner = best(op, p, size, alpha, beta, names, shm=shm)
        if previous is not None and winner != previous:
            changes.append((size, winner))
        previous = winner
    return changes


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> AlphaBeta:
    """Fit t = α + nβ by least squares to one-way ping-pong times (seconds) per size (bytes).

    Pass half the round-trip time. Needs at least two distinct sizes."""
    if len(sizes) != len(times):
        raise ArgumentError(f"times: expected {len(sizes)} values (one per size), "
                         f"got {len(times)}")
    if len(set(sizes)) < 2:
        raise ArgumentError(f"sizes: expected at least two distinct sizes, got {list(sizes)!r}")
    mean_n = sum(sizes) / len(sizes)
    mean_t = sum(times) / len(times)
    sxx = sum((n - mean_n) ** 2 for n in sizes)
    sxy = sum((n - mean_n) * (t - mean_t) for n, t in zip(sizes, times))
    beta = sxy / sxx
    return AlphaBeta(alpha=mean_t - beta * mean_n, beta=beta)
