"""OSU-style latency sweep of one operation over sizes, for our algorithms and for peers.

Per size, every series (each requested algorithm, then each peer) runs on the same buffers.
Per series: ``warmup`` untimed calls, then ``iters`` timed calls, each preceded by an untimed
barrier (raw MPI on a private communicator). A nonblocking call is timed from start to the end
of ``wait()``. The timed calls are interleaved: they run in up to ``BLOCKS`` blocks, each
series taking its turn at one block (after one untimed call, so it starts from its own warm
state, as a program calling one algorithm in a loop does), so that a slow phase of a shared
machine (another tenant, a host's scheduling; on the 2-core VMs here latencies move up to 2x
from run to run) hits every series alike instead of deciding a comparison. The series that
goes first rotates from block to block, size to size and round to round, so no series always
pays for a fresh size (cold caches; buffer pages are faulted in at allocation).

Iterations scale with size: ``iters`` (and ``warmup``) apply up to ``SCALE_BYTES``; above,
they shrink in proportion to the size, but never below ``MIN_ITERS`` (``MIN_WARMUP``) or the
value asked for, whichever is smaller. ``--iters``/``--warmup`` set the small-size counts.

A series whose first call raises on any rank (an operation this build lacks, a dtype a
peer cannot reduce, a missing progress engine for ``--nonblocking``) is skipped on every rank
with the reason; a call that fails halfway through a collective on one rank only would
leave the others waiting, so the job's launcher timeout is the backstop there.

With ``rounds`` > 1 every series is measured that many times per size, and the round with
the lowest median is kept (as ``timeit`` keeps its best repeat): on a shared machine a round
disturbed by another process is then discarded instead of deciding a comparison. The median
is what the tuner and the "automatic vs the fastest" summary compare, so the kept round is the
best by that same measure. The tuner uses 3 rounds.

Statistics: every rank times every iteration; rank 0 takes, per iteration, the maximum over
ranks (an operation is done when its slowest rank is), and reports the mean (``Avg``),
minimum, maximum and median of those over the iterations, in microseconds.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from . import ops
from .sizes import format_size

SCALE_BYTES = 64 << 10
MIN_ITERS = 20
MIN_WARMUP = 3
BLOCKS = 10             # interleaved blocks per round, at most ...
MIN_BLOCK_ITERS = 10    # ... of at least this many timed calls (when there are that many)
PROGRESS_EVERY_S = 2.0


@dataclass
class Point:
    """One measured (series, size): latencies in µs, bandwidths in GB/s (10⁹ bytes/s)."""

    size: int
    iters: int
    avg_us: float
    min_us: float
    max_us: float
    median_us: float
    algbw_gbps: float
    busbw_gbps: float
    algo: str = ""          # the algorithm that ran, where "automatic" chose one


@dataclass
class Series:
    """One column of the comparison: one of our algorithms, or a peer library."""

    name: str
    kind: str               # "ours" or "peer"
    points: list[Point] = field(default_factory=list)
    skipped: str = ""       # why the series has no points, when it has none


@dataclass
class Result:
    """A whole sweep: what ran, where, and every series."""

    op: str
    backend: str
    ranks: int
    dtype: str
    inplace: bool
    nonblocking: bool
    series: list[Series]
    created: str = ""
    host: str = ""
    mpi: str = ""
    ranks_per_node: int = 0
    link: str = ""   # the link between nodes the selector went by, on several nodes

    def get(self, name: str) -> Series:
        """The series called `name`; KeyError if there is none."""
        for series in self.series:
            if series.name == name:
                return series
        raise KeyError(name)


@dataclass
class Config:
    """What to sweep (the command-line options, parsed)."""

    op: str
    sizes: list[int]
    algos: list[str]
    peers: list[str] = field(default_factory=list)
    backend: str = "mpi"
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))
    inplace: bool = False
    nonblocking: bool = False
    iters: int = 1000
    warmup: int = 100
    progress: bool = True
    rounds: int = 1
    shared: list[str] = field(default_factory=list)   # of `algos`, those also run on
                                                       # al.shared_empty buffers
    new_buffers: bool = False   # every series also on new buffers every call


SHARED_SUFFIX = " [shared]"
NEW_BUFFERS_SUFFIX = " [new buffers]"


def scaled(count: int, size: int, floor: int) -> int:
    """`count` iterations up to SCALE_BYTES, then fewer in proportion, never below the floor."""
    if size <= SCALE_BYTES:
        return count
    return max(min(count, floor), count * SCALE_BYTES // size)


def time_calls(fn: Callable[[], Any], iters: int, warmup: int,
               barrier: Callable[[], Any]) -> np.ndarray:
    """Run `fn` warmup times, then time `iters` calls each after an untimed barrier (s)."""
    for _ in range(warmup):
        fn()
    times = np.empty(iters)
    _time_into(times, fn, barrier)
    return times


def time_interleaved(calls: list[Callable[[], Any]], iters: int, warmup: int,
                     barrier: Callable[[], Any], first: int = 0) -> list[np.ndarray]:
    """Time `iters` calls of each of `calls` (s, one array per call), interleaved in blocks.

    Each call first runs `warmup` times; then every block runs each call once untimed and
    its share of the timed calls, the call going first rotating by one from block to block,
    starting at index `first`. Every rank must pass the same calls in the same order."""
    for fn in calls:
        for _ in range(warmup):
            fn()
    times = [np.empty(iters) for _ in calls]
    blocks = max(1, min(BLOCKS, iters // MIN_BLOCK_ITERS))
    bounds = [iters * b // blocks for b in range(blocks + 1)]
    n = len(calls)
    for block in range(blocks):
        for turn in range(n):
            k = (first + block + turn) % n
            calls[k]()
            _time_into(times[k][bounds[block]:bounds[block + 1]], calls[k], barrier)
    return times


def _time_into(times: np.ndarray, fn: Callable[[], Any], barrier: Callable[[], Any]) -> None:
    """Fill `times` with the seconds of as many calls of `fn`, each after `barrier()`."""
    clock = time.perf_counter
    for i in range(times.size):
        barrier()
        start = clock()
        fn()
        times[i] = clock() - start


def summarize(per_rank: np.ndarray, size: int, iters: int, bus_factor: float,
              divisor: int = 1) -> Point:
    """Turn (ranks × iters) seconds into a Point: slowest rank per iteration, then stats."""
    slowest = per_rank.max(axis=0) / divisor
    avg = float(slowest.mean())
    algbw = size / avg / 1e9 if avg > 0 else 0.0
    return Point(size, iters, avg * 1e6, float(slowest.min()) * 1e6,
                 float(slowest.max()) * 1e6, float(np.median(slowest)) * 1e6,
                 algbw, algbw * bus_factor)


def better_round(point: Point, kept: Point | None) -> bool:
    """Whether a round's ``point`` replaces the one ``kept`` so far: a lower median."""
    return kept is None or point.median_us < kept.median_us


class Progress:
    """Progress lines on stderr (rank 0), at most one every PROGRESS_EVERY_S seconds."""

    def __init__(self, enabled: bool, total: int, label: str):
        self.enabled, self.total, self.label = enabled, total, label
        self.start = self.last = time.monotonic()
        self.done = 0

    def point_done(self, size: int, latencies: dict[str, float]) -> None:
        self.done += 1
        now = time.monotonic()
        if not self.enabled or now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        best = ", ".join(f"{name} {us:.1f}" for name, us in latencies.items())
        print(f"[bench] {self.label}: {self.done}/{self.total} sizes, {now - self.start:.0f} s;"
              f" {format_size(size)}: {best} us", file=sys.stderr, flush=True)


def busy_warning() -> str:
    """A warning when other work already loads this machine (empty when it looks idle)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return ""
    cores = os.cpu_count() or 1
    if load <= cores / 2:
        return ""
    return (f"[bench] warning: this machine was busy before the run (load average {load:.1f}"
            f" on {cores} cores); latencies may be disturbed — consider --rounds 3")


def run(config: Config, comm, world: MPI.Comm, peers: list) -> list[Series]:
    """Sweep `config` on every rank (collective); rank 0 gets the points, others empty lists.

    `comm` is our communicator, `peers` the peer objects (bench/peers.py) already created."""
    from aluminum.tuning import selector

    spec = ops.spec(config.op)
    rank, p = world.Get_rank(), world.Get_size()
    sync = world.Dup()
    zeros = _allocator(comm)
    shared_algos = list(config.shared)
    # The [shared] series run on a communicator of their own: once al.shared_empty has
    # allocated on a communicator, "automatic" chooses for shared buffers on it (as for a
    # program keeping its gradient buckets there), and the private series measure one
    # without.
    shared_comm = comm.copy() if shared_algos else None
    series = [Series(a, "ours") for a in config.algos] + \
        [Series(a + SHARED_SUFFIX, "ours") for a in shared_algos] + \
        [Series(peer.name, "peer") for peer in peers]
    runners: list[Any] = list(config.algos) + shared_algos + list(peers)
    on_shared = [False] * len(config.algos) + [True] * len(shared_algos) + \
        [False] * len(peers)
    on_new = [False] * len(runners)
    if config.new_buffers:   # our algorithms and mpi4py, each called on new buffers
        fresh = list(config.algos) + [peer for peer in peers if peer.name == "mpi4py"]
        series += [Series((runner if isinstance(runner, str) else runner.name)
                          + NEW_BUFFERS_SUFFIX, "ours" if isinstance(runner, str) else "peer")
                   for runner in fresh]
        runners += fresh
        on_shared += [False] * len(fresh)
        on_new += [True] * len(fresh)
    sizes = _distinct_sizes(spec, config.sizes, config.dtype.itemsize, p)
    progress = Progress(config.progress and rank == 0, len(sizes),
                        f"{spec.name} on {p} ranks")
    default = getattr(comm.backend, "default_algorithm", "") or "mpi_passthrough"
    for index, size in enumerate(sizes):
        case = ops.build_case(spec, size, config.dtype, config.inplace, rank, p, zeros)
        shared_case = ops.build_case(spec, size, config.dtype, config.inplace, rank, p,
                                     _shared_allocator(shared_comm)) if shared_algos else None
        iters = scaled(config.iters, case.size, MIN_ITERS)
        warmup = scaled(config.warmup, case.size, MIN_WARMUP)
        calls = {i: _prepare(entry, runner, shared_case if on_shared[i] else case,
                             shared_comm if on_shared[i] else comm, config.nonblocking, world,
                             on_new[i])
                 for i, (entry, runner) in enumerate(zip(series, runners))
                 if not entry.skipped}
        calls = {i: fn for i, fn in calls.items() if fn is not None}
        best: dict[int, Point] = {}
        order = list(calls)
        for round_ in range(config.rounds):
            timed = time_interleaved([calls[i] for i in order], iters,
                                     warmup if round_ == 0 else 0, sync.Barrier,
                                     first=index + round_)   # (blocks re-warm anyway)
            for i, times in zip(order, timed):
                gathered = np.empty((p, iters)) if rank == 0 else None
                world.Gather(times, gathered, root=0)
                if rank == 0:
                    point = summarize(gathered, case.size, iters, spec.bus_factor(p),
                                      ops.per_call_divisor(spec.name))
                    if better_round(point, best.get(i)):
                        best[i] = point
        for i, point in sorted(best.items()):
            if runners[i] == "automatic":
                point.algo = selector.select_algorithm(
                    comm.backend.name, spec.name, p, spec.selector_bytes(case.size, p), default,
                    config.inplace if spec.name == "allreduce" else None,  # as al.allreduce
                    config.nonblocking, selector.node_layout(comm), on_shared[i])
            series[i].points.append(point)
        progress.point_done(case.size,
                            {series[i].name: pt.avg_us for i, pt in sorted(best.items())})
    sync.Free()
    if shared_comm is not None:
        shared_comm.free()
    return series


def _prepare(entry: Series, runner, case: ops.Case, comm, nonblocking: bool,
             world: MPI.Comm, new_buffers: bool = False) -> Callable[[], Any] | None:
    """The call of one series at one point, after a first (warm-up) call succeeded on every
    rank; None, with ``entry.skipped`` set to the reason, otherwise (collective)."""
    from .peers import PeerUnavailable

    fn = None
    try:
        if isinstance(runner, str):
            fn = ops.our_call(case, comm, runner, nonblocking, new_buffers)
        elif comm.backend.uses_streams:
            raise PeerUnavailable(f"{runner.name}: peers run on host buffers only")
        elif new_buffers:
            fn = runner.call(case, nonblocking, new_buffers=True)
        else:
            fn = runner.call(case, nonblocking)
        fn()        # argument errors surface here, on every rank
        error = ""
    except Exception as exc:  # noqa: BLE001 - any failure skips the series, not the run
        error = f"{type(exc).__name__}: {exc}"
    error = _agree(world, error)
    if error:
        entry.skipped = error
        if world.Get_rank() == 0:
            print(f"[bench] skipping {entry.name}: {error}", file=sys.stderr, flush=True)
        return None
    return fn


def _agree(world: MPI.Comm, error: str) -> str:
    """Every rank learns the first rank's error (so all skip a series together)."""
    errors = world.allgather(error)
    return next((e for e in errors if e), "")


def _distinct_sizes(spec: ops.OpSpec, sizes: list[int], itemsize: int, p: int) -> list[int]:
    """Requested sizes whose rounding (ops.actual_size) gives distinct real sizes."""
    seen: dict[int, int] = {}
    for size in sizes:
        seen.setdefault(ops.actual_size(spec, size, itemsize, p), size)
    return list(seen.values())


def _touched_zeros(count: int, dtype: np.dtype) -> np.ndarray:
    """Zeros whose pages are already faulted in (np.zeros maps them lazily, so the first
    series to write a fresh buffer would pay the page faults)."""
    array = np.empty(count, dtype)
    array.fill(0)
    return array


def _shared_allocator(comm) -> Callable[[int, np.dtype], Any]:
    """Zeros in al.shared_empty memory (kept until the communicator is freed), so that
    allreduce can take its zero-copy path, as a training loop's gradient bucket would."""
    import aluminum as al

    def zeros(count: int, dtype: np.dtype) -> np.ndarray:
        array = al.shared_empty(count, dtype, comm)
        array.fill(0)
        return array
    return zeros


def _allocator(comm) -> Callable[[int, np.dtype], Any]:
    """numpy for host backends; cupy device memory for stream-bound (GPU) backends."""
    if not comm.backend.uses_streams:
        return _touched_zeros
    import cupy

    return lambda count, dtype: cupy.zeros(count, dtype)
