"""``python -m aluminum.bench tune``: measure every algorithm, write the selector's table.

For every operation the backend offers more than one algorithm for, the tuner sweeps all of
them side by side (bench/sweep.py, same sizes and buffers) and keeps, per size, the one with
the lowest Avg latency (best of ``--rounds`` rounds) — with hysteresis, because neighbouring
sizes on a busy 2-core machine jitter by a few percent: an algorithm within ``TOLERANCE`` of
the fastest is kept if it won the previous size, else the backend's default
(``mpi_passthrough``, the conservative choice) is taken if it is within ``TOLERANCE``. A
lone size whose winner differs from the same winner on both sides, and beats it by less
than ``ISLAND_TOLERANCE``, is given to its neighbours' winner (one noisy point should not
make two thresholds). A change of winner starts a new threshold at the first size where it
won, so a size between two measured ones uses the smaller's winner (the selector's
nearest-lower rule).

It also runs a raw-MPI ping-pong between ranks 0 and 1 and fits the α-β model the selector
falls back on for comm sizes and operations the table lacks: α from the small sizes
(intercept), β from the large ones (slope), both clamped at 0; per size the one-way time is
half the median round trip, the lowest of ``rounds`` rounds.

The table (shared/DESIGN.md §4, ``aluminum-tuning/1``) goes to ``--output``, else
``$AL_TUNING_FILE``, else ``selector.user_table_path()``. Rules already in that file for
other (backend, op, comm size) are kept, so ``tune --np 2`` then ``tune --np 4`` accumulate.
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
from mpi4py import MPI

from aluminum import costmodel, selector

from . import ops, sweep
from .sizes import format_size

TOLERANCE = 0.05
ISLAND_TOLERANCE = 0.10
PINGPONG_SMALL = [4, 16, 64, 256, 1024]
PINGPONG_LARGE = [64 << 10, 256 << 10, 1 << 20, 4 << 20]


def tunable_ops(backend) -> list[str]:
    """Operations (known to the bench) for which `backend` offers a choice of algorithm."""
    return [op for op in ops.SPECS if len(backend.ops.get(op, ())) > 1]


def choose(points: dict[str, list[sweep.Point]], default: str) -> list[tuple[int, str]]:
    """By-bytes rule entries from each algorithm's points (same sizes in every list)."""
    names = list(points)
    sizes = [pt.size for pt in points[names[0]]]
    avg = [{name: points[name][i].avg_us for name in names} for i in range(len(sizes))]
    winners: list[str] = []
    for here in avg:
        best = min(here.values())
        close = [name for name in names if here[name] <= best * (1 + TOLERANCE)]
        if winners and winners[-1] in close:
            winners.append(winners[-1])
        elif default in close:
            winners.append(default)
        else:
            winners.append(min(names, key=here.__getitem__))
    for i in range(1, len(sizes) - 1):
        around = winners[i - 1]
        if winners[i + 1] == around != winners[i] and \
                avg[i][around] <= avg[i][winners[i]] * (1 + ISLAND_TOLERANCE):
            winners[i] = around
    by_bytes: list[tuple[int, str]] = []
    for size, winner in zip(sizes, winners):
        if not by_bytes or by_bytes[-1][1] != winner:
            by_bytes.append((size if by_bytes else 0, winner))
    return by_bytes


def fit_pingpong(world: MPI.Comm, iters: int = 200,
                 rounds: int = 3) -> costmodel.AlphaBeta | None:
    """α, β from a raw-MPI ping-pong between ranks 0 and 1 (None on one rank; collective)."""
    if world.Get_size() < 2:
        return None
    rank = world.Get_rank()
    sync = world.Dup()
    one_way: dict[int, float] = {}
    for size in PINGPONG_SMALL + PINGPONG_LARGE:
        buf = np.zeros(size, np.uint8)
        if rank == 0:
            fn = lambda: (sync.Send(buf, 1), sync.Recv(buf, 1))  # noqa: E731
        elif rank == 1:
            fn = lambda: (sync.Recv(buf, 0), sync.Send(buf, 0))  # noqa: E731
        else:
            fn = lambda: None  # noqa: E731
        n = sweep.scaled(iters, size, 20)
        one_way[size] = min(float(np.median(sweep.time_calls(fn, n, max(2, n // 10),
                                                             sync.Barrier)))
                            for _ in range(rounds)) / 2
    sync.Free()
    if rank != 0:
        return None
    small = costmodel.fit_alpha_beta(PINGPONG_SMALL, [one_way[s] for s in PINGPONG_SMALL])
    large = costmodel.fit_alpha_beta(PINGPONG_LARGE, [one_way[s] for s in PINGPONG_LARGE])
    return costmodel.AlphaBeta(max(small.alpha, 0.0), max(large.beta, 0.0))


def destination(output: str | None) -> Path:
    """Where the table goes: --output, else $AL_TUNING_FILE, else the user cache."""
    return Path(output or os.environ.get("AL_TUNING_FILE") or selector.user_table_path())


def merge(path: Path, rules: Sequence[selector.Rule]) -> list[selector.Rule]:
    """`rules` plus the rules already at `path` for other (backend, op, comm size)."""
    if not path.exists():
        return list(rules)
    try:
        old = selector.read_table(path)
    except selector.TuningTableError as exc:
        warnings.warn(f"aluminum.bench tune: replacing unusable table {path}: {exc}")
        return list(rules)
    fresh = {(r.backend, r.op, r.comm_size) for r in rules}
    kept = [r for r in old.rules if (r.backend, r.op, r.comm_size) not in fresh]
    return sorted(kept + list(rules), key=lambda r: (r.backend, r.op, r.comm_size))


def run(comm, world: MPI.Comm, sizes: list[int], *, iters: int, warmup: int, rounds: int,
        output: str | None, note: str, only: list[str] | None = None,
        fresh: bool = False, progress: bool = True) -> Path | None:
    """Sweep, fit, write the table (rank 0); return its path on rank 0, None elsewhere."""
    backend = comm.backend
    p, rank = world.Get_size(), world.Get_rank()
    targets = [op for op in tunable_ops(backend) if not only or op in only]
    if rank == 0 and not targets:
        print(f"[tune] the {backend.name} backend offers no choice of algorithm for "
              f"{', '.join(only or ops.SPECS)}; only the ping-pong model is written",
              file=sys.stderr)
    rules = []
    for op in targets:
        algos = backend.algorithms(op)
        config = sweep.Config(op, sizes, algos, backend=backend.name, iters=iters,
                              warmup=warmup, progress=progress, rounds=rounds)
        series = sweep.run(config, comm, world, [])
        if rank != 0:
            continue
        measured = {s.name: s.points for s in series if s.points}
        if not measured:
            print(f"[tune] {op}: no algorithm could run; no rule", file=sys.stderr)
            continue
        by_bytes = [(ops.spec(op).selector_bytes(size, p), algo) for size, algo in
                    choose(measured, backend.default_algorithm or next(iter(measured)))]
        rules.append(selector.Rule(backend.name, op, p, tuple(by_bytes)))
        print(f"[tune] {op} on {p} ranks: " + ", ".join(
            f"{format_size(t)}: {a}" for t, a in by_bytes), file=sys.stderr, flush=True)
    model = fit_pingpong(world, rounds=rounds)
    if rank != 0:
        return None
    return write(destination(output), rules, model, metadata(comm.local_size, note),
                 fresh=fresh)


def write(path: Path, rules: Sequence[selector.Rule], model: costmodel.AlphaBeta | None,
          meta: dict, *, fresh: bool = False) -> Path:
    """Write the table (merged with `path`'s other rules unless `fresh`); return the path.

    The table is validated first, against the registered backends' algorithm names, so
    the tuner never writes a file the selector would reject."""
    from aluminum.backends import get_backend

    table = selector.Table(tuple(rules if fresh else merge(path, rules)), model, meta,
                           str(path))
    selector.parse_table(table.to_json(), str(path),
                         lambda backend, op: get_backend(backend).algorithms(op))
    return selector.write_table(table, path)


def metadata(ranks_per_node: int, note: str) -> dict:
    """Where and when the table was measured."""
    return {"created": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "mpi": MPI.Get_library_version().splitlines()[0].split(",")[0].strip(),
            "ranks_per_node": ranks_per_node, "note": note}


def format_rules(table: selector.Table) -> str:
    """The table in words: metadata, model, then each rule's size ranges."""
    lines = [f"# tuning table: {table.source}"]
    meta = table.metadata
    if meta:
        lines.append("# " + ", ".join(f"{k} {meta[k]}" for k in ("created", "host", "mpi",
                                                                  "ranks_per_node")
                                      if k in meta))
        if "note" in meta:
            lines.append(f"# note: {meta['note']}")
    if table.model is not None:
        lines.append(f"# model: alpha = {table.model.alpha * 1e6:.3g} us, "
                     f"beta = {table.model.beta * 1e9:.4g} ns/B")
    if not table.rules:
        lines.append("(no rules: the selector uses the cost model or each backend's default)")
    for rule in table.rules:
        lines.append(f"{rule.backend} {rule.op}, {rule.comm_size} ranks:")
        for i, (threshold, algo) in enumerate(rule.by_bytes):
            upper = (f"< {format_size(rule.by_bytes[i + 1][0])}"
                     if i + 1 < len(rule.by_bytes) else "and up")
            lines.append(f"  {format_size(threshold):>8} {upper:<12} {algo}")
    return "\n".join(lines) + "\n"
